"""Scoring passages by their words: BM25 over the knowledge index's fields, and what a question's
words weigh. The one module of ranking that reads the index's postings; the rest of ranking reads
what it returns.

A passage's lexical score adds three BM25 scores: its text, its headings (with the file's name,
`HEADING_WEIGHT`) and its whole file (`FILE_WEIGHT`), so that a section titled after the
question, in a file about it, wins over a passing mention. It is multiplied by the share of the
question's informative weight (IDF) the passage holds, to the power `COVERAGE_EXPONENT`; and a
passage whose own heading says exactly what the question says is lifted above the rest. Each
field is scored once per question, and kept (`WordScores`) for the reordering, which weighs the
fields one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.knowledge.index import PassageIndex
from app.knowledge.postings import Field

Scores = npt.NDArray[np.float64]

#: How much the heading field and the whole-file field count next to the passage's text.
HEADING_WEIGHT = 1.5
FILE_WEIGHT = 0.3
#: How far (a share of the best score) a heading that repeats the question word for word is lifted.
EXACT_HEADING_LIFT = 0.5
#: Scores are multiplied by the share of the query's IDF a passage holds, to this power.
COVERAGE_EXPONENT = 0.5


@dataclass(frozen=True, slots=True)
class WordScores:
    """What a question scores on every passage by its words: the lexical score ranking reads
    (`total`), and the BM25 of each field on its own (`file`: one per document)."""

    total: Scores
    body: Scores
    heading: Scores
    file: Scores


def word_scores(index: PassageIndex, query: Mapping[str, float], phrase: Sequence[str]) -> WordScores:
    """The scores of `query` (term -> how much it counts) on every passage (see the module);
    `phrase` is the question's words, for a heading that says them all."""
    numbers = {n: weight for term, weight in query.items() if (n := index.term(term)) is not None}
    body = _bm25(index.body, index.passage_count, numbers)
    heading = _bm25(index.heading, index.passage_count, numbers)
    file = _bm25(index.whole, index.document_count, numbers)
    if not query:
        return WordScores(body.copy(), body, heading, file)
    total: Scores = body + HEADING_WEIGHT * heading + FILE_WEIGHT * file[index.passage_document]
    informative = {term: term_weight(index, term) * weight for term, weight in query.items()}
    held: Scores = np.zeros(index.passage_count, dtype=np.float64)
    for term in query:
        number = index.term(term)
        if number is not None:
            held[index.holders.holders(number)] += informative[term]
    total *= (held / sum(informative.values())) ** COVERAGE_EXPONENT
    exact = index.exact_heading(phrase)
    if exact.size:
        lift = EXACT_HEADING_LIFT * float(total.max())
        for n in exact.tolist():
            if total[n] > 0:
                total[n] += lift
    return WordScores(total, body, heading, file)


def _bm25(field: Field, size: int, query: Mapping[int, float]) -> Scores:
    """The BM25 score of `query` (term number -> how much it counts) on each of `size` documents."""
    scores: Scores = np.zeros(size, dtype=np.float64)
    for term, times in query.items():
        ids, weights = field.postings(term)
        if ids.size:
            scores[ids] += times * weights
    return scores


def term_weight(index: PassageIndex, term: str) -> float:
    """How informative `term` is: its IDF among passage texts (highest for a term none holds)."""
    return index.body.idf(index.term(term))


def holds(index: PassageIndex, term: str, passage: int) -> bool:
    """Whether `passage` holds `term` at all (in its text or headings)."""
    return index.holders.holds(index.term(term), passage)


def documents_holding(index: PassageIndex, term: str) -> list[int] | None:
    """The documents whose files hold `term`; None when the corpus has not a word of it."""
    number = index.term(term)
    return None if number is None else index.whole.holders(number).tolist()


def top(scores: Scores, k: int) -> list[int]:
    """Up to `k` numbers with a positive score, best first (ties in number order)."""
    if k <= 0 or not scores.size:
        return []
    if scores.size > 4 * k + 64:
        candidates = np.argpartition(-scores, k)[:k]
        order = sorted(candidates.tolist(), key=lambda i: (-scores[i], i))
    else:
        order = np.argsort(-scores, kind="stable")[:k].tolist()
    return [i for i in order if scores[i] > 0]
