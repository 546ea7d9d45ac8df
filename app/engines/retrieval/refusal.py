"""Knowing when the corpus does not answer a question: one rule, for every ranking.

**By words**, a question is covered when one of the first passages found (`COVERAGE_DEPTH`)
holds enough of the question's own informative weight (IDF): `MIN_COVERAGE` of it, or
`MIN_SHARED_COVERAGE` when at least two of its words meet there (a word the corpus lacks weighs
most).

**With vectors**, three things are weighed, each against the corpus itself rather than a constant
tuned on one set:

- how alike the question and its best passage are, against the best that unrelated questions
  reach on the same passages (`calibration.UNRELATED`, kept in the index): no higher than nine
  in ten of them is unrelated;
- whether the passages found cover the question by words (on its own, that rule refuses too
  little on a large corpus): a question they do not cover must look clearly more related than
  unrelated questions do, by twice their spread;
- whether the question names something (a capitalised or camel-case word: a product, a place,
  an API) that the corpus never mentions, or that only a few of its documents mention in
  passing and none of the pages found does: a question about a neighbouring product shares
  most of its words with the corpus, but not its name (Redux's docs name Zustand once, in their
  history). Pages, not passages: for "requests to the Docker daemon through docker.sock", undici's
  client page is found, but not its passage that names Docker. An initialism ("CI", "ID") is
  missing only when no document has it, and one of two letters never ("the VS Code debugger"):
  it often stands for words the pages spell out or do not need ("our CI sets HTTPS_PROXY" is a
  question about proxies).

**A question about the knowledge itself** is not refused for the other names it holds: one that
names a word of the knowledge's name (`anvil index --name`, else its folder's) that most of its
documents hold (`SUBJECT_SHARE`) is on-topic, whatever else it names ("I serve a Vue app from
Flask", asked of Flask's docs; "flask run fails on my new MacBook"). Words that say what kind of
collection it is ("docs", "handbook") name no subject.

**Without vectors**, a question is refused when it is not covered by words or when it names
something the corpus lacks, initialisms included: with no similarity to weigh, a name is the only
sign of a question about something else ("maternity pay in the UK", asked of a handbook two of
whose pages name the UK in passing).

The same rule holds one-shot and inside a conversation; a follow-up is judged with the question
it follows (it is as related as that question, or as their pair), since "can I add more than
one?" says little alone. A question that does not lean on the one before is judged alone. The
lift of a follow-up's page only reorders what was found: refusal does not read it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.engines.retrieval.follow_ups import Question
from app.engines.retrieval.fusion import BEFORE_WEIGHT, unrelated_quantile
from app.engines.retrieval.lexical import Scores, documents_holding, holds, term_weight
from app.knowledge.index import PassageIndex
from app.knowledge.tokens import STOPWORDS, tokenize

#: Share of the question's informative weight (IDF) one of the first passages must hold.
MIN_COVERAGE = 0.5
#: ... or this share, when at least two of the question's words meet in it.
MIN_SHARED_COVERAGE = 0.2
#: How many of the first passages found may cover the question.
COVERAGE_DEPTH = 3
#: The unrelated questions' quantile at or below which a question is unrelated too.
UNRELATED_QUANTILE = 0.9
#: How many spreads (the 90th percentile less the median) of the unrelated questions' scores a
#: question not covered by words must stand above their median.
UNCOVERED_SPREADS = 2.0
#: A name that appears in at most this share of the documents is particular to them.
RARE_NAME_SHARE = 0.1
#: An initialism this short ("VS" of "VS Code", "UI", "DB") abbreviates words more often than it
#: names a product: with vectors, it is never missing.
_SHORT_INITIALISM = 2
#: A word of the knowledge's name that at least this share of its documents hold is its subject.
SUBJECT_SHARE = 0.5
#: Words of a knowledge's name that say what kind of collection it is, not what it is about.
_COLLECTION_WORDS = frozenset(
    tokenize(
        "docs documentation document handbook guide guides manual reference knowledge base wiki "
        "site pages book notes corpus help"
    )
)

#: Capitalised in English without naming anything a corpus could lack.
_CALENDAR = frozenset(
    {
        *("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"),
        *("january", "february", "march", "april", "may", "june", "july", "august"),
        *("september", "october", "november", "december"),
    }
)
_NAME = re.compile(r"(?<![A-Za-z0-9])[A-Za-z][A-Za-z0-9]*(?:[.+#-][A-Za-z0-9]+)*")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|[\"“(]\s*)$")
_INNER_CAPITAL = re.compile(r"[a-z][A-Z]")
# A number just before a word makes it a unit ("16 MB", "2 GiB"), not a name.
_AFTER_NUMBER = re.compile(r"\d[\d.,]*\s*$")
# The arguments of a call the question quotes ("logger.info('user', userId)"): the asker's own
# values, not names of anything a corpus could lack.
_CALL_ARGUMENTS = re.compile(r"[A-Za-z_$][\w$.]*\(([^()]*)\)")


@dataclass(frozen=True)
class Signals:
    """What a question scored on every passage by meaning (cosine; None without vectors), and
    the passages found, best first."""

    similarity: Scores | None = None
    ranked: tuple[int, ...] = ()
    #: Whether `similarity` is a follow-up's and its question's together (`BEFORE_WEIGHT`).
    paired: bool = False
    #: For a follow-up that refers back: the best similarity of the question it leans on.
    leaned: float | None = None


def refuse(
    index: PassageIndex, question: Question, signals: Signals, subject: frozenset[str] = frozenset()
) -> bool:
    """Whether to answer that nothing was found for `question` (see the module), given the
    words that say what the knowledge is about (`subject_terms`)."""
    if not signals.ranked:
        return True
    about = not subject.isdisjoint(question.own)
    return verdict(signals, covers(index, signals.ranked, question.own), index, question.text, about=about)


def subject_terms(index: PassageIndex, name: str | None) -> frozenset[str]:
    """The words of the knowledge's `name` that say what it is about: those most of the
    documents of `index` hold (`SUBJECT_SHARE`), other than words for a kind of collection."""
    documents = max(index.document_count, 1)
    return frozenset(
        term
        for term in tokenize(name or "")
        if term not in _COLLECTION_WORDS
        and (holders := documents_holding(index, term)) is not None
        and len(holders) / documents >= SUBJECT_SHARE
    )


def verdict(
    signals: Signals, covered: bool, index: PassageIndex, question: str, *, about: bool = False
) -> bool:
    """The rule of the module, given whether the passages found cover the question by words and
    whether it names what the knowledge is about (`about`: then no name it holds refuses it)."""
    if signals.similarity is None:
        if not covered:
            return True
        return not about and bool(missing_names(question, index, signals.ranked, initialisms=True))
    median, high = unrelated_quantile(index, 0.5), unrelated_quantile(index, UNRELATED_QUANTILE)
    if median is None or high is None:
        return not covered
    best = float(signals.similarity.max())
    if signals.paired:
        best /= 1.0 + BEFORE_WEIGHT
    if signals.leaned is not None:
        # A follow-up that refers back is as related as the question it leans on.
        best = max(best, signals.leaned)
    if best <= high:
        return True
    if not covered and best <= median + UNCOVERED_SPREADS * (high - median):
        return True
    return not about and bool(missing_names(question, index, signals.ranked))


def covers(index: PassageIndex, ranked: Sequence[int], own: Sequence[str]) -> bool:
    """Whether one of the first passages `ranked` holds enough of the question's own terms
    `own` (see the module)."""
    distinct = set(own)
    if not distinct:
        return True
    weight = {term: term_weight(index, term) for term in distinct}
    total = sum(weight.values())
    for n in ranked[:COVERAGE_DEPTH]:
        held = [term for term in distinct if holds(index, term, n)]
        share = sum(weight[term] for term in held) / total
        if share >= MIN_COVERAGE or (len(held) >= 2 and share >= MIN_SHARED_COVERAGE):
            return True
    return False


def names(question: str) -> list[str]:
    """The words of `question` that name something: capitalised other than at the start of a
    sentence (and not "I"), or with a capital inside ("makeAutoObservable"); never part of a word
    that starts with a digit ("2FA"), a unit after a number ("16 MB"), or an argument of a call
    the question quotes ("logger.info('user', userId)")."""
    found: list[str] = []
    arguments = [call.span(1) for call in _CALL_ARGUMENTS.finditer(question)]
    for match in _NAME.finditer(question):
        word = match.group()
        if any(start <= match.start() < end for start, end in arguments):
            continue
        if word.lower() in STOPWORDS or word.lower() in _CALENDAR or word == "I":
            continue
        if _AFTER_NUMBER.search(question[max(0, match.start() - 16) : match.start()]):
            continue
        inner = bool(_INNER_CAPITAL.search(word))
        starts = bool(_SENTENCE_START.search(question[: match.start()]))
        if inner or (word[0].isupper() and not starts):
            found.append(word)
    return found


def missing_names(
    question: str, index: PassageIndex, ranked: Sequence[int], *, initialisms: bool = False
) -> list[str]:
    """The names of `question` the corpus lacks: in no document at all, or in only a few of them
    (`RARE_NAME_SHARE`) and in none of the pages the `ranked` passages are from. An initialism
    counts only in the first way, unless `initialisms` (see the module)."""
    missing: list[str] = []
    documents = max(index.document_count, 1)
    pages = set(index.passage_document[list(ranked)].tolist())
    held = {name: documents_holding(index, terms[0]) for name in names(question) if (terms := tokenize(name))}
    for name, holders in held.items():
        if holders is None:
            if initialisms or not (name.isupper() and len(name) <= _SHORT_INITIALISM):
                missing.append(name)
            continue
        if name.isupper() and not initialisms:
            continue
        if len(holders) / documents <= RARE_NAME_SHARE and pages.isdisjoint(holders):
            missing.append(name)
    return missing
