"""Fusing the lexical and the vector ranking of passages.

**Fusion** is a weighted sum of the two scores, each first made relative to the question: BM25
(`lexical.word_scores`) as a share of the best passage's, similarity as how far a passage stands
between what an unrelated question scores on this corpus (the median of
`calibration.UNRELATED`, kept in the index) and the best passage, weighted 1.5 to 1. Measured
against reciprocal rank fusion (k = 60) on three public documentation sets (`bench/eval.py`,
`docs/evaluation.md`), the weighted sum found the right page as often or more, and it keeps a
passage that only one ranking finds strongly above those both find weakly, which rank fusion
cannot tell apart.

**A follow-up** lifts the passages of the file the answer before it cited first by a quarter of the
best score: a conversation mostly stays on its page, and "do I have to come back to work for a
while afterward?" finds the parental-leave page it follows rather than the general leave page.
Measured (`bench/eval.py`) on the two sets where follow-ups missed, the 18F handbook and Anvil's
own docs, they found their page 2 and 3 of 5 times without the lift and 4 and 4 with it, and
nothing else changed on any set (a share from 0.2 to 0.3 does the same; 0.1 and 0.4 lose one).
Ranked by words alone it gained nothing and lost a follow-up, so only the fused ranking lifts.
The lift only reorders what was found: refusal does not read it.

Refusal reads the calibration too (`app.engines.retrieval.refusal`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from app.engines.retrieval.lexical import Scores
from app.knowledge.index import PassageIndex

#: How passages are ranked: by words, by meaning, both fused by weighted sum (`hybrid`), or both
#: fused by reciprocal rank (`rrf`, kept for measuring against).
Ranking = Literal["lexical", "vector", "hybrid", "rrf"]
#: Reciprocal rank fusion's constant, as its authors chose it.
RRF_K = 60

#: How much the question a follow-up leans on counts in its similarity, next to its own.
BEFORE_WEIGHT = 0.5
#: How far (a share of the best score) a follow-up lifts the passages of the file the answer
#: before it cited first.
FOLLOW_UP_LIFT = 0.25
#: ... when its best passage scores at least this share of the best passage's.
FOLLOW_UP_NEAR = 0.8
#: Weight of the (relative) similarity next to the (relative) BM25 score.
VECTOR_WEIGHT = 1.5


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
    `FOLLOW_UP_LIFT` of the best score (a follow-up staying on the page it follows), when that
    page still answers it nearly as well as the best (`FOLLOW_UP_NEAR`)."""
    best = float(scores.max())
    if best <= 0:
        return scores
    page = index.passage_document == document
    if not page.any() or float(scores[page].max()) < FOLLOW_UP_NEAR * best:
        return scores
    lifted = scores.copy()
    lifted[page & (scores > 0)] += FOLLOW_UP_LIFT * best
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
