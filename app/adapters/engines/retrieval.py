"""An answer engine that ranks corpus passages with BM25 and quotes the best one, citing it."""

from __future__ import annotations

import functools
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.adapters.engines.corpus import CorpusPassage, load_corpus
from app.ports import Answer, Passage, PastExchange

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

#: The composed answer never grows beyond this many characters.
MAX_ANSWER_CHARS = 1500

NO_MATCH_ANSWER = (
    "I found nothing in the documentation that matches this question. "
    "Try rephrasing it, for example with the name of the feature or setting you mean."
)

_WORD = re.compile(r"[^\W_]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LINE_UNIT = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s|^\s{4}|^\s*\|")

# Kept small on purpose: words like "long" or "keep" carry meaning in questions about storage.
_STOPWORD_TEXT = """
a about all also an and any are as at be been but by can could did do does doing for from had has
have how i if in into is it its just me more my no not of on or our should so some such than that
the their them then there these they this those to us was we were what when where which while who
whom why will with would you your
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# Pronouns anywhere, or a leading "and"/"also"/"more", mark a question that leans on the last one.
_REFERRING = frozenset({"it", "its", "that", "this", "these", "they", "them", "those", "there"})
_CONTINUING = frozenset({"and", "also", "more"})
_SHORT_QUESTION_TERMS = 3
_SEE_ALSO = 2
_MAX_EXCERPT_SENTENCES = 3


def tokenize(text: str) -> list[str]:
    """Lowercased, stemmed content words of `text`; the index and every query use exactly this."""
    return [_stem(word) for word in _WORD.findall(text.lower()) if word not in _STOPWORDS]


# A corpus has a few thousand distinct words, each occurring many times: stem each once.
@functools.lru_cache(maxsize=16_384)
def _stem(word: str) -> str:
    """A light suffix stripper: enough for "configured", "configures" and "configure" to meet."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            # "stopped" -> "stopp" -> "stop", so it meets "stop".
            if word[-1] == word[-2] and word[-1] not in "aeiouls":
                word = word[:-1]
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def looks_like_follow_up(question: str) -> bool:
    """Whether `question` probably refers back to the previous one (short, or "it", "and ...")."""
    words = _WORD.findall(question.lower())
    if not words:
        return True
    return (
        len(tokenize(question)) <= _SHORT_QUESTION_TERMS
        or words[0] in _CONTINUING
        or any(word in _REFERRING for word in words)
    )


class _Bm25Index:
    """A typed face over a bm25s retriever, which ships without type hints."""

    def __init__(self, documents: list[list[str]]) -> None:
        # Imported here: bm25s pulls in numpy and scipy, which is start-up work, not import work.
        import bm25s

        # bm25s pins its logger at DEBUG on import; let it follow the level Anvil is configured with.
        logging.getLogger("bm25s").setLevel(logging.NOTSET)
        retriever = bm25s.BM25()
        retriever.index(documents, show_progress=False)
        self._vocabulary: dict[str, int] = dict(retriever.vocab_dict)
        self._scores: Callable[[list[str]], npt.NDArray[np.float32]] = retriever.get_scores

    def top(self, query: list[str], k: int) -> list[tuple[int, float]]:
        """Up to `k` (document number, score) pairs with a positive score, best first."""
        import numpy as np

        known = [token for token in query if token in self._vocabulary]
        if not known or k <= 0:
            return []
        scores = self._scores(known)
        # A stable sort keeps ties in corpus order, so equal queries give equal answers.
        order = np.argsort(-scores, kind="stable")[:k]
        return [(int(i), float(scores[i])) for i in order if scores[i] > 0]


class RetrievalEngine:
    """Answers from a Markdown corpus: BM25 over heading-level passages, with cited quotes.

    Build one with `build` (from a directory) or `from_passages`; queries run inline and are fast.
    """

    name = "retrieval"

    def __init__(self, passages: tuple[CorpusPassage, ...], index: _Bm25Index | None) -> None:
        self._passages = passages
        self._index = index

    @classmethod
    def build(cls, corpus_dir: Path) -> RetrievalEngine:
        """Load every `*.md` file under `corpus_dir` and index its passages (blocking; run off-loop)."""
        return cls.from_passages(load_corpus(corpus_dir))

    @classmethod
    def from_passages(cls, passages: Iterable[CorpusPassage]) -> RetrievalEngine:
        """Index the given passages; headings are indexed with the text so that they count."""
        kept = tuple(passages)
        documents = [tokenize(f"{p.heading}\n{p.text}") for p in kept]
        return cls(kept, _Bm25Index(documents) if kept else None)

    @property
    def passage_count(self) -> int:
        """How many passages the index holds."""
        return len(self._passages)

    async def search(self, text: str, max_results: int) -> list[Passage]:
        """The passages that best match `text`, best first, at most `max_results` (never zero-score)."""
        return self._rank(tokenize(text), max_results)

    async def answer(
        self, question: str, history: Sequence[PastExchange], instructions: str | None = None
    ) -> Answer:
        """Quote the best passage for `question`, citing it, and point at up to two more.

        A follow-up ("and how is it configured?") borrows the terms of the previous question, at
        half the weight of its own. `instructions` do not change the ranking.
        """
        query = self._query(question, history)
        # Rank a few extra so that chunks of an already cited section can be skipped.
        ranked = self._rank(query, 1 + _SEE_ALSO * 3)
        if not ranked:
            return Answer(text=NO_MATCH_ANSWER)
        best, used = ranked[0], [ranked[0]]
        for passage in ranked[1:]:
            if len(used) > _SEE_ALSO:
                break
            if all((passage.source, passage.heading) != (p.source, p.heading) for p in used):
                used.append(passage)

        lead = f"According to {_cite(best)}: "
        see_also = ", ".join(_cite(p) for p in used[1:])
        tail = f"\n\nSee also: {see_also}" if see_also else ""
        excerpt = _excerpt(best.text, Counter(query), MAX_ANSWER_CHARS - len(lead) - len(tail))
        return Answer(text=_shorten(lead + excerpt + tail, MAX_ANSWER_CHARS), sources=tuple(used))

    def _query(self, question: str, history: Sequence[PastExchange]) -> list[str]:
        """The question's terms, plus the previous question's when this one leans on it."""
        terms = tokenize(question)
        if history and looks_like_follow_up(question):
            # Doubling the current terms keeps them in charge; the earlier ones only add context.
            return terms * 2 + tokenize(history[-1].question)
        return terms

    def _rank(self, query: list[str], max_results: int) -> list[Passage]:
        if self._index is None:
            return []
        ranked: list[Passage] = []
        for i, score in self._index.top(query, max_results):
            found = self._passages[i]
            ranked.append(Passage(source=found.source, heading=found.heading, text=found.text, score=score))
        return ranked


def _cite(passage: Passage) -> str:
    return f"{passage.source} ({passage.heading})"


def _excerpt(text: str, weights: Counter[str], budget: int) -> str:
    """The 1-3 sentences of `text` that carry the most query terms, in reading order."""
    sentences = _sentences(text)
    if not sentences:
        return ""
    scored = [(sum(weights[t] for t in set(tokenize(s))), i) for i, s in enumerate(sentences)]
    best = max(score for score, _ in scored)
    if best == 0:
        # The match was in the heading only: the section's opening is the best summary.
        chosen = [0]
    else:
        # Sentences far weaker than the best one are noise, not support.
        strong = sorted(
            (item for item in scored if item[0] * 2 >= best), key=lambda item: (-item[0], item[1])
        )
        chosen = [i for _, i in strong[:_MAX_EXCERPT_SENTENCES]]
    # Drop the weakest picks until the excerpt fits; the strongest is shortened if it alone does not.
    while len(chosen) > 1 and len(" ".join(sentences[i] for i in sorted(chosen))) > budget:
        chosen.pop()
    return _shorten(" ".join(sentences[i] for i in sorted(chosen)), budget)


def _sentences(text: str) -> list[str]:
    """Sentences of prose paragraphs; list items, table rows and code lines count as one each."""
    units: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line for line in paragraph.splitlines() if line.strip()]
        if any(_LINE_UNIT.match(line) for line in lines):
            units.extend(" ".join(line.split()) for line in lines)
        else:
            units.extend(_SENTENCE_END.split(" ".join(" ".join(lines).split())))
    return [unit for unit in units if unit]


def _shorten(text: str, limit: int) -> str:
    """`text` cut at a word boundary to at most `limit` characters, marked with an ellipsis."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return "…"[:limit]
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit - 1].rstrip() + "…"
