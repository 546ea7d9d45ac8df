"""Telling a follow-up from a question that stands alone, and what a follow-up borrows.

"And how is it configured?" leans on the question before it: the embedded engine then ranks it
with that question's terms (at half weight) and, with vectors, with that question's meaning too,
and lifts the file the answer before it cited first (`followed_page`): a conversation mostly
stays on the page it is about. Whether a question follows is decided once (`read_question`), and
everything after reads that decision.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.domain.ports import PastExchange
from app.knowledge.index import PassageIndex
from app.knowledge.tokens import tokenize, words

#: How much a borrowed term (from the question before a follow-up) counts next to its own.
BORROWED_WEIGHT = 0.5
# Pronouns anywhere, or a leading "and"/"also"/"what about", mark a question that leans on the
# last one; so does a question of one or two content words.
_REFERRING = frozenset(
    {"it", "its", "that", "this", "these", "they", "them", "those", "afterward", "afterwards"}
)
_CONTINUING = frozenset({"and", "also", "more", "but"})
_ELLIPTIC = (("what", "about"), ("how", "about"), ("what", "if"))
_SHORT_QUESTION_TERMS = 2
# What a file named in an answer can be: a run of characters without spaces, brackets, quotes
# or separators, as answers kept before turns kept their sources named it ("According to
# guide/setup.md (Install): ...", "See `api/Store.md`.").
_NAMED = re.compile(r"[^\s()\[\]{}<>`'\"\u201c\u201d\u2018\u2019,;:*|]+")
_FOLLOW_UP_DEPTH = 3


def refers_back(question: str) -> bool:
    """Whether `question` points at the previous one in so many words: a pronoun ("is it ..."),
    an opening "and"/"also"/"but", or an elliptic "what about ..." (not merely being short)."""
    found = words(question)
    return bool(found) and (
        found[0] in _CONTINUING or tuple(found[:2]) in _ELLIPTIC or any(word in _REFERRING for word in found)
    )


def looks_like_follow_up(question: str) -> bool:
    """Whether `question` leans on the previous one: a pronoun ("it", "them"), an elliptic start
    ("and ...", "what about ..."), or too few content words to stand alone."""
    found = words(question)
    if not found:
        return True
    return (
        found[0] in _CONTINUING
        or tuple(found[:2]) in _ELLIPTIC
        or any(word in _REFERRING for word in found)
        or len(tokenize(question)) <= _SHORT_QUESTION_TERMS
    )


def borrowed(history: Sequence[PastExchange]) -> dict[str, float]:
    """Terms of the questions a follow-up leans on: the last one, and further back while each
    was itself a follow-up; each step back counts half as much."""
    borrowed: dict[str, float] = {}
    weight = BORROWED_WEIGHT
    for past in list(reversed(history))[:_FOLLOW_UP_DEPTH]:
        for term in tokenize(past.question):
            borrowed.setdefault(term, weight)
        if not looks_like_follow_up(past.question):
            break
        weight /= 2
    return borrowed


def cited_page(answer: str, document: Callable[[str], int | None]) -> int | None:
    """The first corpus file `answer` names (the one it is answered from, as the embedded engine
    cited it before turns kept their sources: "According to `source` (heading): ..."), as
    `document` numbers a corpus file's
    relative path (None for any other word); None when it names none."""
    for match in _NAMED.finditer(answer):
        name = match.group().rstrip(".!?")
        if "." in name and (number := document(name)) is not None:
            return number
    return None


@dataclass(frozen=True)
class Question:
    """A question as ranking reads it: its text and its own terms, the terms it is ranked by
    (`query`: its own at 1, a follow-up's borrowed ones less), its words (for a heading that
    says them all), and, for a follow-up, the question it follows."""

    text: str
    own: tuple[str, ...]
    query: dict[str, float] = field(compare=False)
    phrase: tuple[str, ...]
    #: The question before, when this one leans on it (it is embedded with it); else None.
    follows: str | None = None
    #: Whether it points back at the question before in so many words (`refers_back`).
    refers_back: bool = False


def read_question(text: str, history: Sequence[PastExchange] = ()) -> Question:
    """`text` read for ranking, after `history` (oldest first): a follow-up borrows the terms
    of the questions it leans on."""
    own = tuple(tokenize(text))
    query = dict.fromkeys(own, 1.0)
    if not history or not looks_like_follow_up(text):
        return Question(text, own, query, tuple(words(text)))
    for term, weight in borrowed(history).items():
        query.setdefault(term, weight)
    return Question(text, own, query, tuple(words(text)), history[-1].question, refers_back(text))


def followed_page(history: Sequence[PastExchange], index: PassageIndex) -> int | None:
    """The document of `index` the last answer was given from: the first of its sources that is
    one of the index's documents. A turn kept before turns kept their sources is read from its
    text (`cited_page`)."""
    last = history[-1]
    sources = last.sources
    if sources is None:
        return cited_page(last.answer, index.document)
    return next((n for source in sources if (n := index.document(source)) is not None), None)
