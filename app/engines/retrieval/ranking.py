"""Ranking the passages of one index for a question: by words, by meaning, or both fused and
reordered (`Ranker.rank`), with what the refusal rule weighs.

By words, the lexical score (`lexical.word_scores`). By meaning, the cosine of the question's
vector and each passage's (a follow-up's with half the similarity of the question it follows
added). Hybrid, the two fused (`fusion.fuse`), reordered (`rerank`), and a follow-up's page
lifted (`fusion.lift`); `rrf` and `vector` are kept for measuring against (`bench/eval.py`).
"""

from __future__ import annotations

import numpy as np

from app.domain.ports import Passage, Vectors
from app.engines.retrieval.follow_ups import Question
from app.engines.retrieval.fusion import BEFORE_WEIGHT, Ranking, fuse, lift, rank_fuse
from app.engines.retrieval.lexical import Scores, top, word_scores
from app.engines.retrieval.refusal import Signals
from app.engines.retrieval.rerank import rerank
from app.knowledge.index import PassageIndex

#: Passage numbers with their scores, best first.
Ranked = list[tuple[int, float]]


class Ranker:
    """The ranking of one index, in the mode given (by words alone when it has no vectors)."""

    def __init__(
        self, index: PassageIndex, mode: Ranking = "hybrid", subject: frozenset[str] = frozenset()
    ) -> None:
        self.index = index
        self.mode: Ranking = mode if index.vectors is not None else "lexical"
        #: The words that say what the knowledge is about (`refusal.subject_terms`).
        self.subject = subject

    def rank(
        self, question: Question, k: int, vectors: Vectors | None = None, page: int | None = None
    ) -> tuple[Ranked, Signals]:
        """Up to `k` passages with a positive score, best first, and what the refusal rule
        weighs. `vectors` holds the question's vector, then (for a follow-up) the one of the
        question it follows; fused, the passages of a follow-up's `page` are lifted."""
        index = self.index
        query = question.query
        vector = None if vectors is None else vectors[0]
        if not index.passage_count or (not query and vector is None) or k <= 0:
            return [], Signals()
        words = word_scores(index, query, question.phrase)
        if vector is None or index.vectors is None or self.mode == "lexical":
            ranked = [(n, float(words.total[n])) for n in top(words.total, k)]
            return ranked, Signals(None, tuple(n for n, _ in ranked))
        similarity: Scores = (index.vectors @ vector).astype(np.float64)
        paired = vectors is not None and len(vectors) > 1
        leaned = None
        if paired:
            assert vectors is not None
            earlier = index.vectors @ vectors[1]
            if question.refers_back:
                leaned = float(earlier.max())
            similarity = similarity + BEFORE_WEIGHT * earlier
        if self.mode == "vector":
            scores = similarity
        elif self.mode == "rrf":
            scores = rank_fuse(words.total, similarity)
        else:
            scores = rerank(index, words, similarity, fuse(words.total, similarity, index))
            if page is not None:
                scores = lift(scores, index, page)
        ranked = [(n, float(scores[n])) for n in top(scores, k)]
        return ranked, Signals(similarity, tuple(n for n, _ in ranked), paired, leaned)

    def passage(self, n: int, score: float) -> Passage:
        """Passage `n` as the domain sees it, with its score."""
        found = self.index.passage(n)
        return Passage(
            source=found.source,
            heading=found.heading,
            text=found.text,
            score=score,
            index_version=self.index.version or None,
            url=self.index.url(n),
            title=self.index.file_title(found.source),
        )
