"""The lexical part of a knowledge index: Okapi BM25 postings as flat arrays.

One vocabulary (term -> number) serves every field. A field keeps, for each term, the documents
holding it and their precomputed BM25 weights in compressed sparse rows: the documents of term
`t` are `ids[indptr[t]:indptr[t + 1]]`, in ascending order. Scoring a query on them (one
vectorised addition per query term, whatever the size of the corpus) is ranking's
(`app.engines.retrieval.lexical`); the arrays are served from the index file as they lie
(`artifact.py`), so opening an index builds only the vocabulary.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[np.float64]
Ids = npt.NDArray[np.int32]

#: Lucene's BM25 parameters.
K1 = 1.2
B = 0.75


class Vocabulary:
    """Terms and their numbers; `terms` is stored in the index, the lookup is built on opening."""

    def __init__(self, terms: Sequence[str]) -> None:
        self.terms = list(terms)
        self.numbers = {term: number for number, term in enumerate(self.terms)}

    def __len__(self) -> int:
        return len(self.terms)

    def __contains__(self, term: object) -> bool:
        return term in self.numbers


class Field:
    """BM25 over one field of `size` documents (BM25 weights, or only which documents hold a
    term when built with `weighted=False`)."""

    def __init__(self, size: int, indptr: npt.NDArray[np.int64], ids: Ids, weights: Scores | None) -> None:
        self.size = size
        self.indptr = indptr
        self.ids = ids
        self.weights = weights
        self._idf_of_unknown = idf_of(size, 0)

    @classmethod
    def build(
        cls, documents: Sequence[Sequence[int]], vocabulary_size: int, *, weighted: bool = True
    ) -> Field:
        """The field over `documents`, each a list of term numbers (repeats count as frequency)."""
        terms: list[int] = []
        docs: list[int] = []
        counts: list[int] = []
        for number, tokens in enumerate(documents):
            for term, count in Counter(tokens).items():
                terms.append(term)
                docs.append(number)
                counts.append(count)
        term_array = np.array(terms, dtype=np.int64)
        doc_array = np.array(docs, dtype=np.int32)
        order = np.lexsort((doc_array, term_array))
        term_array, doc_array = term_array[order], doc_array[order]
        indptr = np.zeros(vocabulary_size + 1, dtype=np.int64)
        np.cumsum(np.bincount(term_array, minlength=vocabulary_size), out=indptr[1:])
        size = len(documents)
        if not weighted:
            return cls(size, indptr, doc_array, None)
        lengths = np.array([len(tokens) for tokens in documents], dtype=np.float64)
        average = float(lengths.mean()) if size and lengths.sum() else 1.0
        norms = K1 * (1 - B + B * lengths / average)
        # `math.log` per term, as queries compute it, so stored weights and query IDFs agree.
        idf = np.array([idf_of(size, int(f)) for f in np.diff(indptr)], dtype=np.float64)
        tf = np.array(counts, dtype=np.float64)[order]
        weights = idf[term_array] * tf * (K1 + 1) / (tf + norms[doc_array])
        return cls(size, indptr, doc_array, weights)

    def arrays(self, prefix: str) -> dict[str, npt.NDArray[Any]]:
        found: dict[str, npt.NDArray[Any]] = {f"{prefix}.indptr": self.indptr, f"{prefix}.ids": self.ids}
        if self.weights is not None:
            found[f"{prefix}.weights"] = self.weights
        found[f"{prefix}.size"] = np.array([self.size], dtype=np.int64)
        return found

    @classmethod
    def from_arrays(
        cls, get: Callable[[str], npt.NDArray[Any]], prefix: str, *, weighted: bool = True
    ) -> Field:
        weights = get(f"{prefix}.weights") if weighted else None
        return cls(int(get(f"{prefix}.size")[0]), get(f"{prefix}.indptr"), get(f"{prefix}.ids"), weights)

    def holders(self, term: int) -> Ids:
        """The documents holding term number `term`, ascending."""
        return self.ids[self.indptr[term] : self.indptr[term + 1]]

    def holds(self, term: int | None, document: int) -> bool:
        if term is None:
            return False
        found = self.holders(term)
        at = int(np.searchsorted(found, document))
        return at < len(found) and int(found[at]) == document

    def idf(self, term: int | None) -> float:
        """The term's IDF; a term no document holds gets the highest there is."""
        if term is None:
            return self._idf_of_unknown
        return idf_of(self.size, int(self.indptr[term + 1] - self.indptr[term]))

    def postings(self, term: int) -> tuple[Ids, Scores]:
        """The documents holding term number `term`, ascending, and its BM25 weight in each."""
        assert self.weights is not None
        start, end = self.indptr[term], self.indptr[term + 1]
        return self.ids[start:end], self.weights[start:end]


def idf_of(size: int, document_frequency: int) -> float:
    """Lucene's BM25 IDF of a term found in `document_frequency` of `size` documents."""
    return math.log(1 + (size - document_frequency + 0.5) / (document_frequency + 0.5))
