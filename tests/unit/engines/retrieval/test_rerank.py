"""Reordering the fused ranking's candidates: which passages it reorders, that scores keep their
scale, and that a passage opening a short page on the question wins a near-tie against one deep
in a long page, over a corpus this test writes."""

from __future__ import annotations

import numpy as np

from app.engines.retrieval.fusion import fuse
from app.engines.retrieval.lexical import top, word_scores
from app.engines.retrieval.rerank import (
    FUSED_CANDIDATES,
    RANKING_CANDIDATES,
    features,
    keep_fused_pages,
    ranks_of,
    rerank,
)
from app.knowledge.corpus import CorpusPassage
from app.knowledge.index import PassageIndex
from app.knowledge.tokens import tokenize, words

QUESTION = "How do I donate leave hours to a coworker?"


def corpus() -> list[CorpusPassage]:
    """A short page about donating leave, a long leave page with a section on it deep inside, and
    forty passages about other things."""
    passages = [CorpusPassage("donating-leave.md", "Donating leave", "Donate leave hours to a coworker.")]
    for n in range(12):
        passages.append(CorpusPassage("leave.md", f"Leave > Kinds > Kind {n}", f"Kind {n} of leave hours."))
    deep = "Leave > Kinds > Other > Donating leave"
    passages.append(CorpusPassage("leave.md", deep, "Donate leave hours to a coworker."))
    for n in range(40):
        passages.append(CorpusPassage(f"topic-{n}.md", f"Topic {n}", f"Travel expense {n} and receipts."))
    return passages


def test_the_candidates_are_reordered_and_keep_the_fused_scores_scale() -> None:
    index = PassageIndex.from_passages(corpus())
    query = dict.fromkeys(tokenize(QUESTION), 1.0)
    scored = word_scores(index, query, words(QUESTION))
    lexical = scored.total
    similarity = np.random.default_rng(7).uniform(0.7, 0.9, index.passage_count)
    fused = fuse(lexical, similarity, index)

    reordered = rerank(index, scored, similarity, fused)

    candidates = (
        set(top(fused, FUSED_CANDIDATES))
        | set(top(lexical, RANKING_CANDIDATES))
        | set(top(similarity, RANKING_CANDIDATES))
    )
    assert set(np.flatnonzero(reordered).tolist()) == candidates
    # The k-th passage reordered has the k-th best fused score: the same values, in a new order.
    kept = sorted(candidates)
    assert np.allclose(np.sort(reordered[kept]), np.sort(fused[kept]))
    assert len(candidates) < index.passage_count  # the rest score nothing
    # The fused ranking's first two pages are among the first three reordered.
    pages = [index.passage(n).source for n in top(fused, 40)]
    first = list(dict.fromkeys(index.passage(n).source for n in top(reordered, 40)))[:3]
    assert set(list(dict.fromkeys(pages))[:2]) <= set(first)


def test_the_fused_rankings_first_two_pages_stay_among_the_first_three_reordered() -> None:
    # Passages 0 to 6 of pages 0, 0, 1, 2, 3, 4, 4; the fused ranking likes pages 4 and 3 best.
    documents = np.array([0, 0, 1, 2, 3, 4, 4])
    fused = np.array([0.1, 0.2, 0.3, 0.4, 0.8, 0.6, 0.9])
    in_order = np.arange(7)
    # Both left out: each moves up by its first passage in the order, before page 1, best first.
    assert keep_fused_pages(in_order, fused, documents).tolist() == [0, 1, 5, 4, 2, 3, 6]
    # One left out: it takes the third page's place.
    order = np.array([4, 0, 1, 2, 6, 3, 5])
    assert keep_fused_pages(order, fused, documents).tolist() == [4, 0, 1, 6, 2, 3, 5]
    # Page 3 third and page 4 fourth: moving page 4 up alone would push page 3 out, so both move.
    order = np.array([0, 2, 4, 6, 1, 3, 5])
    assert keep_fused_pages(order, fused, documents).tolist() == [0, 6, 4, 2, 1, 3, 5]
    # Both among the first three pages already: the order stands.
    order = np.array([0, 6, 1, 4, 2, 3, 5])
    assert keep_fused_pages(order, fused, documents).tolist() == order.tolist()
    # Fewer than three pages: nothing can be left out.
    assert keep_fused_pages(np.array([1, 0]), fused, documents).tolist() == [1, 0]


def test_features_say_which_passage_opens_its_file_and_how_deep_its_heading_is() -> None:
    index = PassageIndex.from_passages(corpus())
    query = dict.fromkeys(tokenize(QUESTION), 1.0)
    scored = word_scores(index, query, words(QUESTION))
    lexical = scored.total
    similarity = np.full(index.passage_count, 0.8)
    fused = fuse(lexical, similarity, index)
    short, deep = 0, 13
    rows = features(index, scored, similarity, fused, np.array([short, deep]))
    opens, depth, log_passages = rows[:, 5], rows[:, 6], rows[:, 7]
    assert opens.tolist() == [1.0, 0.0]
    assert depth.tolist() == [0.0, 3.0]
    assert np.allclose(np.exp(log_passages), [1.0, 13.0])


def test_a_short_page_on_the_question_wins_a_near_tie_against_a_section_deep_in_a_long_page() -> None:
    index = PassageIndex.from_passages(corpus())
    query = dict.fromkeys(tokenize(QUESTION), 1.0)
    scored = word_scores(index, query, words(QUESTION))
    lexical = scored.total
    short, deep = 0, 13
    similarity = np.full(index.passage_count, 0.75)
    similarity[[short, deep]] = 0.86
    similarity[deep] += 0.02  # the deep section is a shade closer by meaning
    fused = fuse(lexical, similarity, index)
    assert fused[deep] > fused[short]

    reordered = rerank(index, scored, similarity, fused)

    assert int(reordered.argmax()) == short
    assert reordered[deep] > 0


def test_ranks_of_some_passages_count_those_scoring_more_and_ties_share_a_rank() -> None:
    scores = np.array([0.0, 3.0, 1.0, 3.0, 0.0, 2.0, 0.0])
    assert ranks_of(scores, np.arange(scores.size)).tolist() == [5, 1, 4, 1, 5, 3, 5]
    assert ranks_of(scores, np.array([6, 3, 6])).tolist() == [5, 1, 5]
    rng = np.random.default_rng(3)
    for _ in range(20):
        scores = rng.integers(0, 6, size=200).astype(np.float64) / 2  # many ties
        chosen = rng.choice(200, size=30, replace=False)
        counted = [1 + int((scores > scores[n]).sum()) for n in chosen.tolist()]
        assert ranks_of(scores, chosen).tolist() == counted
