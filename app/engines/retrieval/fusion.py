"""Fusing the lexical and the vector ranking of passages, and knowing when neither found anything.

**Fusion** is a weighted sum of the two scores, each first made relative to the question: BM25
as a share of the best passage's, similarity as how far a passage stands between what an
unrelated question scores on this corpus (the median of `calibration.UNRELATED`, kept in the
index) and the best passage, weighted 1.5 to 1. Measured against reciprocal rank fusion (k =
60) on three public documentation sets (`bench/eval.py`, `docs/answers.md`), the weighted sum
found the right page as often or more, and it keeps a passage that only one ranking finds strongly above
those both find weakly, which rank fusion cannot tell apart.

**A follow-up** lifts the passages of the file the answer before it cited first by a quarter of the
best score: a conversation mostly stays on its page, and "do I have to come back to work for a
while afterward?" finds the parental-leave page it follows rather than the general leave page.
Measured (`bench/eval.py`) on the two sets where follow-ups missed, the 18F handbook and Anvil's
own docs, they found their page 2 and 3 of 5 times without the lift and 4 and 4 with it, and
nothing else changed on any set (a share from 0.2 to 0.3 does the same; 0.1 and 0.4 lose one).
Ranked by words alone it gained nothing and lost a follow-up, so only the fused ranking lifts.
The lift only reorders what was found: refusal does not read it.

**Refusal** with vectors weighs three things, each against the corpus itself rather than a
constant tuned on one set:

- how alike the question and its best passage are, against the best that unrelated questions
  reach on the same passages: no higher than nine in ten of them is unrelated;
- whether the passages found hold the question's informative words (the lexical rule, which on
  its own refuses too little on a large corpus): a question they do not hold must look clearly
  more related than unrelated questions do, by twice their spread;
- whether the question names something (a capitalised or camel-case word: a product, a place,
  an API) that the corpus never mentions, or that only a few of its documents mention in
  passing and none of the pages found does: a question about a neighbouring product shares
  most of its words with the corpus, but not its name (Redux's docs name Zustand once, in their
  history). Pages, not passages: for "requests to the Docker daemon through docker.sock", undici's
  client page is found, but not its passage that names Docker. An initialism ("CI", "ID") is
  missing only when no document has it: it often stands for words the pages spell out or do not
  need ("our CI sets HTTPS_PROXY" is a question about proxies).

Without vectors, a question is refused when the lexical rule does not cover it or when it names
something the corpus lacks, initialisms included: with no similarity to weigh, a name is the only
sign of a question about something else ("maternity pay in the UK", asked of a handbook two of
whose pages name the UK in passing).

The same rule holds one-shot and inside a conversation; a follow-up is judged with the question
it follows (it is as related as that question, or as their pair), since "can I add more than
one?" says little alone. A question that does not lean on the one before is judged alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from app.knowledge.index import PassageIndex
from app.knowledge.tokens import STOPWORDS, tokenize

Scores = npt.NDArray[np.float64]
#: How passages are ranked: by words, by meaning, both fused by weighted sum (`hybrid`), or both
#: fused by reciprocal rank (`rrf`, kept for measuring against).
Ranking = Literal["lexical", "vector", "hybrid", "rrf"]
#: Reciprocal rank fusion's constant, as its authors chose it.
RRF_K = 60

#: How much the heading field and the whole-file field count next to the passage's text.
HEADING_WEIGHT = 1.5
FILE_WEIGHT = 0.3
#: How far (a share of the best score) a heading that repeats the question word for word is lifted.
EXACT_HEADING_LIFT = 0.5
#: Scores are multiplied by the share of the query's IDF a passage holds, to this power.
COVERAGE_EXPONENT = 0.5
#: How much the question a follow-up leans on counts in its similarity, next to its own.
BEFORE_WEIGHT = 0.5
#: How far (a share of the best score) a follow-up lifts the passages of the file the answer
#: before it cited first.
FOLLOW_UP_LIFT = 0.25
#: Weight of the (relative) similarity next to the (relative) BM25 score.
VECTOR_WEIGHT = 1.5
#: The unrelated questions' quantile at or below which a question is unrelated too.
UNRELATED_QUANTILE = 0.9
#: How many spreads (the 90th percentile less the median) of the unrelated questions' scores a
#: question the lexical rule does not cover must stand above their median.
UNCOVERED_SPREADS = 2.0
#: A name that appears in at most this share of the documents is particular to them.
RARE_NAME_SHARE = 0.1

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


def lexical_scores(index: PassageIndex, query: Mapping[str, float], phrase: Sequence[str]) -> Scores:
    """The BM25 score of every passage: its text, its headings (`HEADING_WEIGHT`) and its whole
    file (`FILE_WEIGHT`), times the share of the query's informative weight it holds. A passage
    whose own heading says exactly what the question says (`phrase`, its words) is lifted above
    the rest."""
    scores: Scores = np.zeros(index.passage_count, dtype=np.float64)
    if not query:
        return scores
    numbers = {n: weight for term, weight in query.items() if (n := index.term(term)) is not None}
    index.body.add_scores(scores, numbers)
    index.heading.add_scores(scores, numbers, HEADING_WEIGHT)
    whole = index.whole.scores(numbers)
    scores += FILE_WEIGHT * whole[index.passage_document]
    informative = {term: index.body.idf(index.term(term)) * weight for term, weight in query.items()}
    held: Scores = np.zeros(index.passage_count, dtype=np.float64)
    index.holders.add_presence(
        held, {n: informative[term] for term in query if (n := index.term(term)) is not None}
    )
    scores *= (held / sum(informative.values())) ** COVERAGE_EXPONENT
    exact = index.exact_heading(phrase)
    if exact.size:
        lift = EXACT_HEADING_LIFT * float(scores.max())
        for n in exact.tolist():
            if scores[n] > 0:
                scores[n] += lift
    return scores


def fuse(lexical: Scores, similarity: Scores, index: PassageIndex) -> Scores:
    """The hybrid score of every passage (see the module)."""
    fused: Scores = share_of_best(lexical) + VECTOR_WEIGHT * relative_similarity(similarity, index)
    return fused


def share_of_best(scores: Scores) -> Scores:
    """Each score as a share of the best one (all 0 when none is positive)."""
    best = float(scores.max()) if scores.size else 0.0
    shares: Scores = scores / best if best > 0 else np.zeros_like(scores)
    return shares


def relative_similarity(similarity: Scores, index: PassageIndex) -> Scores:
    """Where each passage's similarity stands between what an unrelated question scores on this
    corpus (0) and the best passage's (1); at least -1."""
    floor = unrelated_quantile(index, 0.5)
    if floor is None:  # an index without calibration: the passages' own median
        floor = float(np.median(similarity))
    best = float(similarity.max())
    # No more alike than an unrelated question: nothing by meaning (at most -1 each).
    spread = max(best - floor, 1e-6)
    relative: Scores = np.clip((similarity - floor) / spread, -1.0, 1.0)
    return relative


def lift(scores: Scores, index: PassageIndex, document: int) -> Scores:
    """`scores` with the passages of `document` that scored above zero lifted by
    `FOLLOW_UP_LIFT` of the best score (a follow-up staying on the page it follows)."""
    best = float(scores.max())
    if best <= 0:
        return scores
    lifted = scores.copy()
    lifted[(index.passage_document == document) & (scores > 0)] += FOLLOW_UP_LIFT * best
    return lifted


def rank_fuse(lexical: Scores, similarity: Scores) -> Scores:
    """Reciprocal rank fusion: the sum of 1 / (k + rank) over both rankings (a passage with no
    word of the question has no lexical rank)."""
    fused: Scores = 1.0 / (RRF_K + _ranks(similarity))
    lexical_ranks = _ranks(lexical)
    held = lexical > 0
    fused[held] += 1.0 / (RRF_K + lexical_ranks[held])
    return fused


def _ranks(scores: Scores) -> Scores:
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.float64)
    ranks[order] = np.arange(1, len(scores) + 1)
    return ranks


def unrelated_quantile(index: PassageIndex, q: float) -> float | None:
    """The `q` quantile of the best similarity unrelated questions reach in `index`."""
    scores = (index.calibration or {}).get("unrelated") or []
    if not scores:
        return None
    return float(np.quantile(np.asarray(scores, dtype=np.float64), q))


def refuse(signals: Signals, covered: bool, index: PassageIndex, question: str) -> bool:
    """Whether to answer that nothing was found (see the module). `covered` is the lexical rule's
    verdict."""
    if signals.similarity is None:
        return not covered or bool(missing_names(question, index, signals.ranked, initialisms=True))
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
    return bool(missing_names(question, index, signals.ranked))


def names(question: str) -> list[str]:
    """The words of `question` that name something: capitalised other than at the start of a
    sentence (and not "I"), or with a capital inside ("makeAutoObservable"); never part of a word
    that starts with a digit ("2FA")."""
    found: list[str] = []
    for match in _NAME.finditer(question):
        word = match.group()
        if word.lower() in STOPWORDS or word.lower() in _CALENDAR or word == "I":
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
    for name in names(question):
        terms = tokenize(name)
        if not terms:
            continue
        number = index.term(terms[0])
        if number is None:
            missing.append(name)
            continue
        if name.isupper() and not initialisms:
            continue
        holders = index.whole.holders(number).tolist()
        if len(holders) / documents <= RARE_NAME_SHARE and pages.isdisjoint(holders):
            missing.append(name)
    return missing
