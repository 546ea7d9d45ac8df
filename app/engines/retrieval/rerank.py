"""Reordering the passages the fused ranking found, by what else is known about them and their files.

The fused score (`fusion.fuse`) weighs how well a passage matches; among passages that match about
as well (most of the misses measured: a page on the same subject first, the right one second or
third), other facts tell: whether the passage opens its file, how deep its heading is, how many
passages its file has, how well its file as a whole matches by words and by meaning, and how its
text and its heading match on their own. `rerank` scores the candidates (the best 20 fused, the
best 15 by words and the best 15 by meaning) with a linear model over twelve such features.

The weights were fitted by `bench/rerank_fit.py` on the single questions of the three public
question sets of `bench/eval.py` (listwise, with an L2 penalty of 0.05, each match feature kept to
its sign), never on Anvil's own docs, which change with every commit. Fitted on two sets and
scored on the third, for each in turn, the first page was right more often than by the fused score
alone on every set left out (the 18F handbook 20 to 23 of 30, Redux 24 to 27 of 30, Starlette 24
to 26 of 28), and among the first three as often or more; with the weights fitted on all three,
Anvil's docs found 13 of 20, as the fused score does. `WEIGHTS` are the ones fitted on all three.

Those sets are guides and prose; on a corpus of API reference pages (undici's docs, never fitted
on), the weights found the same 26 first pages of 30 as the fused score, but pushed three right
pages out of the first three: for a question on capping how many hosts it talks to, the opening
passage of the pool page ("A pool of Client instances...") outranks the agent constructor's
options, two headings deep in the right page. So the reordering picks the order, but the fused
ranking's first two pages stay among the first three (`keep_fused_pages`): that kept all 29 on
undici's docs and changed nothing on the other six sets (npm's and fastify's docs, never fitted
on either, among them).

The order changes; the scores keep their scale: the k-th passage reordered gets the k-th best
fused score, so what reads scores (the see-also floor, the lift of a follow-up's page) reads
them as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from app.engines.retrieval.fusion import relative_similarity, share_of_best
from app.engines.retrieval.lexical import Scores, WordScores, top
from app.knowledge.index import PassageIndex

#: The fused ranking's first pages (`KEPT_PAGES`) stay among the first `KEPT_WITHIN` reordered.
KEPT_PAGES = 2
KEPT_WITHIN = 3
#: How many of the best passages of each ranking are reordered.
FUSED_CANDIDATES = 20
RANKING_CANDIDATES = 15
#: The fitted weight of each feature (per unit of the feature, as computed in `features`).
WEIGHTS = {
    "log_lexical_rank": -0.177 / 1.6110,
    "log_vector_rank": -0.567 / 1.5632,
    "heading": 0.085 / 0.3246,
    "body": 0.436 / 0.2671,
    "file_words": 0.727 / 0.3047,
    "opens_file": 0.545 / 0.2437,
    "depth": -0.351 / 0.9491,
    "log_file_passages": -0.574 / 0.8267,
    "file_similarity": 0.610 / 0.2676,
    "file_lexical": 0.570 / 0.3280,
    "file_among_best": 0.333 / 3.2823,
    "similarity_gap": 0.460 / 0.0214,
}
_COEFFICIENTS = np.array(list(WEIGHTS.values()), dtype=np.float64)


def rerank(index: PassageIndex, words: WordScores, similarity: Scores, fused: Scores) -> Scores:
    """`fused` with its candidates reordered (see the module): every other passage scores 0."""
    candidates = candidates_of(words.total, similarity, fused)
    reordered: Scores = np.zeros_like(fused)
    if not candidates.size:
        return reordered
    learned = features(index, words, similarity, fused, candidates) @ _COEFFICIENTS
    order = keep_fused_pages(candidates[np.argsort(-learned, kind="stable")], fused, index.passage_document)
    reordered[order] = np.sort(fused[candidates])[::-1]
    return reordered


def keep_fused_pages(
    order: npt.NDArray[np.int64], fused: Scores, documents: npt.NDArray[Any]
) -> npt.NDArray[np.int64]:
    """`order` (passages, best first) with the fused ranking's first `KEPT_PAGES` pages among its
    first `KEPT_WITHIN` pages: those that come after the first page they would be pushed out by
    move up to just before it, each by its best passage in `order`, best fused page first."""
    passages = order.tolist()
    pages = list(dict.fromkeys(documents[passages].tolist()))
    by_fused = order[np.argsort(-fused[order], kind="stable")]
    kept = list(dict.fromkeys(documents[by_fused].tolist()))[:KEPT_PAGES]
    others = [page for page in pages if page not in kept]
    room = KEPT_WITHIN - len(kept)
    if len(others) <= room:
        return order
    displaced = others[room]
    behind = pages[pages.index(displaced) :]
    moved = [next(n for n in passages if documents[n] == page) for page in kept if page in behind]
    if not moved:
        return order
    rest = [n for n in passages if n not in moved]
    at = next(i for i, n in enumerate(rest) if documents[n] == displaced)
    return np.array(rest[:at] + moved + rest[at:], dtype=np.int64)


def candidates_of(lexical: Scores, similarity: Scores, fused: Scores) -> npt.NDArray[np.int64]:
    """The passages reordered: the best of the fused ranking, of words and of meaning."""
    chosen = set(top(fused, FUSED_CANDIDATES)) | set(top(lexical, RANKING_CANDIDATES))
    return np.array(sorted(chosen | set(top(similarity, RANKING_CANDIDATES))), dtype=np.int64)


def features(
    index: PassageIndex,
    words: WordScores,
    similarity: Scores,
    fused: Scores,
    candidates: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """One row of `WEIGHTS`' features per candidate passage; the fields' BM25 scores are those
    the lexical ranking computed (`words`)."""
    documents = index.passage_document
    count = index.document_count
    lexical = words.total
    relative = share_of_best(lexical)
    alike = relative_similarity(similarity, index)
    file_similarity = np.full(count, -1.0)
    np.maximum.at(file_similarity, documents, alike)
    file_lexical = np.zeros(count)
    np.maximum.at(file_lexical, documents, relative)
    among_best = np.bincount(documents[top(fused, RANKING_CANDIDATES)], minlength=count)
    passages = np.bincount(documents, minlength=count).astype(np.float64)
    ours = documents[candidates]
    opens = np.array([n == 0 or documents[n - 1] != documents[n] for n in candidates.tolist()])
    depth = np.array([index.passage(n).heading.count(" > ") for n in candidates.tolist()], dtype=np.float64)
    columns = [
        np.log(ranks_of(lexical, candidates)),
        np.log(ranks_of(similarity, candidates)),
        share_of_best(words.heading)[candidates],
        share_of_best(words.body)[candidates],
        share_of_best(words.file)[ours],
        opens.astype(np.float64),
        depth,
        np.log(passages[ours]),
        file_similarity[ours],
        file_lexical[ours],
        among_best[ours].astype(np.float64),
        similarity[candidates] - float(similarity.max()),
    ]
    return np.stack(columns, axis=1)


def ranks_of(scores: Scores, passages: npt.NDArray[np.int64]) -> Scores:
    """The rank of each of `passages` in `scores`: 1 plus how many passages score more (tied
    passages share a rank, whatever their order)."""
    ahead = scores.size - np.searchsorted(np.sort(scores), scores[passages], side="right")
    found: Scores = (1 + ahead).astype(np.float64)
    return found
