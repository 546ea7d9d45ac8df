"""An Okapi BM25 index over tokenised documents, scored with numpy.

Each term keeps its postings (document numbers) and their precomputed BM25 weights, so a query
costs one vectorised addition per query term, whatever the size of the corpus.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[np.float64]


class Bm25Index:
    """BM25 (Lucene's IDF, `k1`, `b`) over a fixed list of token lists."""

    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.size = len(documents)
        lengths = np.array([len(tokens) for tokens in documents], dtype=np.float64)
        average = float(lengths.mean()) if self.size and lengths.sum() else 1.0
        norms = k1 * (1 - b + b * lengths / average)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for number, tokens in enumerate(documents):
            for term, count in Counter(tokens).items():
                ids, counts = postings.setdefault(term, ([], []))
                ids.append(number)
                counts.append(count)
        self.vocabulary: dict[str, int] = {}
        self._ids: list[npt.NDArray[np.intp]] = []
        self._weights: list[Scores] = []
        idf: list[float] = []
        for term, (ids, counts) in postings.items():
            self.vocabulary[term] = len(self._ids)
            id_array = np.array(ids, dtype=np.intp)
            tf = np.array(counts, dtype=np.float64)
            term_idf = self.idf_of(len(ids))
            weights = term_idf * tf * (k1 + 1) / (tf + norms[id_array])
            self._ids.append(id_array)
            self._weights.append(weights)
            idf.append(term_idf)
        self._idf = idf

    def idf_of(self, document_frequency: int) -> float:
        """The IDF of a term found in `document_frequency` documents (zero gives the highest)."""
        return math.log(1 + (self.size - document_frequency + 0.5) / (document_frequency + 0.5))

    def idf(self, term: str) -> float:
        """The term's IDF; a term the index does not hold gets the highest there is."""
        number = self.vocabulary.get(term)
        return self.idf_of(0) if number is None else self._idf[number]

    def add_scores(self, into: Scores, query: Mapping[str, float], weight: float = 1.0) -> None:
        """Add `weight` times the query's BM25 scores to `into` (one slot per document).

        `query` maps each term to how much it counts (1 for a plain term).
        """
        for term, times in query.items():
            number = self.vocabulary.get(term)
            if number is not None:
                into[self._ids[number]] += (weight * times) * self._weights[number]

    def scores(self, query: Mapping[str, float]) -> Scores:
        """The query's BM25 score of every document."""
        into = np.zeros(self.size, dtype=np.float64)
        self.add_scores(into, query)
        return into


class TermSets:
    """Which documents hold each term at all: to weigh how much of a query a document covers."""

    def __init__(self, documents: Sequence[Iterable[str]]) -> None:
        self.size = len(documents)
        holders: dict[str, list[int]] = {}
        for number, terms in enumerate(documents):
            for term in set(terms):
                holders.setdefault(term, []).append(number)
        self._ids = {term: np.array(ids, dtype=np.intp) for term, ids in holders.items()}

    def coverage(self, query: Mapping[str, float]) -> Scores:
        """For each document, the sum of the weights of the query terms it holds."""
        into = np.zeros(self.size, dtype=np.float64)
        for term, weight in query.items():
            ids = self._ids.get(term)
            if ids is not None:
                into[ids] += weight
        return into

    def __contains__(self, term: object) -> bool:
        return term in self._ids


def top(scores: Scores, k: int) -> list[int]:
    """Up to `k` document numbers with a positive score, best first (ties in document order)."""
    if k <= 0 or not scores.size:
        return []
    if scores.size > 4 * k + 64:
        candidates = np.argpartition(-scores, k)[:k]
        order = sorted(candidates.tolist(), key=lambda i: (-scores[i], i))
    else:
        order = np.argsort(-scores, kind="stable")[:k].tolist()
    return [i for i in order if scores[i] > 0]
