"""An answer engine that ranks corpus passages by words and by meaning and answers from the best
ones, citing them.

The lexical ranking adds three BM25 scores: the passage's text, its headings (with the file's
name), and its whole file, so that a section titled after the question, in a file about it, wins
over a passing mention. When the index holds passage vectors and an embedder is at hand, the
question is embedded too and the two rankings are fused (`hybrid`). A question the corpus does
not cover is refused with `NO_MATCH_ANSWER` and no sources, by a rule that weighs both signals
against what the corpus itself scores (`hybrid.refuse`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import anyio
import numpy as np

from app.domain.ports import (
    Answer,
    Document,
    Embedder,
    IndexStatus,
    Passage,
    PastExchange,
    Progress,
    Vectors,
)
from app.engines.retrieval.excerpts import Excerpt, Unit, choose, fit, shorten, units_of
from app.engines.retrieval.follow_ups import borrowed, cited_page, looks_like_follow_up, refers_back
from app.engines.retrieval.fusion import (
    BEFORE_WEIGHT,
    Ranking,
    Signals,
    fuse,
    lexical_scores,
    lift,
    rank_fuse,
    refuse,
)
from app.engines.retrieval.rerank import rerank
from app.errors import AnvilError
from app.knowledge.index import PassageIndex
from app.knowledge.lexical import Scores, top
from app.knowledge.served import ServedIndex
from app.knowledge.tokens import tokenize, words

__all__ = [
    "MAX_ANSWER_CHARS",
    "NO_MATCH_ANSWER",
    "RetrievalEngine",
    "looks_like_follow_up",
    "tokenize",
]

logger = logging.getLogger(__name__)

#: The composed answer never grows beyond this many characters.
MAX_ANSWER_CHARS = 1500

NO_MATCH_ANSWER = (
    "I found nothing in the documentation that matches this question. "
    "Try rephrasing it, for example with the name of the feature or setting you mean."
)

#: Share of the question's informative weight (IDF) the best passage must hold to be an answer.
MIN_COVERAGE = 0.5
MIN_SHARED_COVERAGE = 0.2

_SEE_ALSO = 2
_SEE_ALSO_SHARE = 0.3
_SECOND_SHARE = 0.25
_SECOND_SCORE = 0.6
_COVERAGE_DEPTH = 3


class RetrievalEngine:
    """Answers from the served knowledge index (an `AnswerEngine`), and serves its passages and
    documents (a `KnowledgeIndex`): BM25 over heading-level passages, with cited excerpts.

    With an `embedder` and an index holding its vectors, each question is embedded and ranked
    `hybrid` (or otherwise: `ranking`, for measuring) in a worker thread; by words alone, the
    ranking runs inline and is fast. A call reads the served index once, when it starts, and
    finishes on it whatever is swapped in meanwhile.
    """

    name = "retrieval"

    def __init__(
        self,
        served: ServedIndex | PassageIndex,
        embedder: Embedder | None = None,
        *,
        ranking: Ranking = "hybrid",
    ) -> None:
        if isinstance(served, PassageIndex):
            served = ServedIndex(served, None if embedder is None else embedder.name)
        self.served = served
        self.embedder = embedder
        self._mode: Ranking = ranking if embedder is not None else "lexical"
        self._ranking = _Ranking(served.index, self._mode)

    @property
    def index(self) -> PassageIndex:
        """The index being served."""
        return self.served.index

    def _current(self) -> _Ranking:
        """The ranking of the index served now (made again once another is swapped in)."""
        ranking = self._ranking
        index = self.served.index
        if ranking.index is not index:
            ranking = self._ranking = _Ranking(index, self._mode)
        return ranking

    def status(self) -> IndexStatus:
        """What is served now (`KnowledgeIndex.status`)."""
        facts = self.served.facts()
        return IndexStatus(
            facts.version,
            facts.passages,
            facts.documents,
            facts.built_at,
            embedder=facts.embedder,
            embedded=facts.embedded,
        )

    @property
    def passage_count(self) -> int:
        """How many passages the index holds."""
        return self.index.passage_count

    @property
    def document_count(self) -> int:
        """How many documents the index holds passages of (0: every question finds nothing)."""
        return self.index.document_count

    async def search(self, text: str, max_results: int) -> list[Passage]:
        """The passages that best match `text`, best first, at most `max_results` (never zero-score)."""
        ranking = self._current()
        if not self._embeds(ranking):
            return ranking.search(text, max_results)
        return await anyio.to_thread.run_sync(
            lambda: ranking.search(text, max_results, self._vectors([text]))
        )

    async def fetch(self, source: str, max_chars: int) -> Document | None:
        """The text of corpus file `source` (front matter stripped), cut at a line end to at most
        `max_chars` characters; None for anything that is not a file of the corpus."""
        return self._current().fetch(source, max_chars)

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        """Answer from the best passage for `question`, citing it (`instructions` and `progress`
        change nothing). A follow-up is embedded with the question it follows."""
        ranking = self._current()
        if not self._embeds(ranking):
            return ranking.answer(question, history)
        texts = [question]
        if history and looks_like_follow_up(question):
            texts.append(history[-1].question)
        # In a worker thread, with the ranking: the similarity of every passage is a product
        # over the whole index, too long to hold the event loop for on a large corpus.
        return await anyio.to_thread.run_sync(lambda: ranking.answer(question, history, self._vectors(texts)))

    def _embeds(self, ranking: _Ranking) -> bool:
        """Whether questions are embedded for `ranking`'s index."""
        return self.embedder is not None and self._mode != "lexical" and ranking.index.vectors is not None

    def _vectors(self, texts: list[str]) -> Vectors | None:
        """The questions' vectors (blocking); None, and ranking by words, when the embedder fails."""
        assert self.embedder is not None
        try:
            return self.embedder.embed(texts, query=True)
        except AnvilError as error:
            logger.warning(
                "embeddings: ranking a question by words alone, since embedding it failed: %s", error
            )
            return None


class _Ranking:
    """The queries of one index, and the sentences of its passages as they are first quoted."""

    def __init__(self, index: PassageIndex, mode: Ranking = "hybrid") -> None:
        self.index = index
        self.mode: Ranking = mode if index.vectors is not None else "lexical"
        self._units: dict[int, tuple[Unit, ...]] = {}

    def search(self, text: str, max_results: int, vectors: Vectors | None = None) -> list[Passage]:
        """The passages that best match `text` (embedded as `vectors[0]`), best first, at most
        `max_results` (never zero-score)."""
        query = dict.fromkeys(tokenize(text), 1.0)
        ranked, _ = self._rank(query, words(text), max_results, None if vectors is None else vectors[0])
        return [self._passage(n, score) for n, score in ranked]

    def fetch(self, source: str, max_chars: int) -> Document | None:
        """The text of corpus file `source` (front matter stripped), cut at a line end to at most
        `max_chars` characters; None for anything that is not a file of the corpus."""
        file = self.index.file(source)
        if file is None:
            return None
        text = file.text
        if len(text) > max_chars:
            limit = max(max_chars, 0)
            cut = text.rfind("\n", 0, limit + 1)
            text = text[: cut if cut > limit // 2 else limit]
        return Document(source=file.source, title=file.title, text=text, total_chars=len(file.text))

    def answer(
        self, question: str, history: Sequence[PastExchange], vectors: Vectors | None = None
    ) -> Answer:
        """Answer from the best passage for `question`, citing it, and point at up to two more pages.

        A follow-up ("and how is it configured?") borrows the terms of the question it follows,
        at half the weight of its own; a standalone question ignores history. A question the
        corpus does not cover is refused with `NO_MATCH_ANSWER` and no sources.
        """
        own = tokenize(question)
        query = dict.fromkeys(own, 1.0)
        follows = bool(history) and looks_like_follow_up(question)
        page = cited_page(history[-1].answer, self.index.document) if follows else None
        if follows:
            for term, weight in borrowed(history).items():
                query.setdefault(term, weight)
        vector = None if vectors is None else vectors[0]
        before = None if vectors is None or len(vectors) < 2 else vectors[1]
        ranked, signals = self._rank(query, words(question), 1 + _SEE_ALSO * 6, vector, before, page)
        if not refers_back(question):
            # Short but pointing at nothing: as related as the pair it makes, no more.
            signals = replace(signals, leaned=None)
        covered = bool(ranked) and self._covers(ranked, own)
        if not ranked or refuse(signals, covered, self.index, question):
            return Answer(text=NO_MATCH_ANSWER)

        weights = {term: self._idf(term) * times for term, times in query.items()}
        excerpt = choose(self._units_of(ranked[0][0]), weights)
        second = self._second(ranked, excerpt, own)
        used = [self._passage(*ranked[0])]
        if second is not None:
            used.append(self._passage(*ranked[second[0]]))
        floor = ranked[0][1] * _SEE_ALSO_SHARE
        for n, score in ranked[1:]:
            if len(used) > _SEE_ALSO or score < floor:
                break
            passage = self.index.passage(n)
            if all(passage.source != p.source for p in used):
                used.append(self._passage(n, score))

        see_also = used[2:] if second is not None else used[1:]
        tail = f"\n\nSee also: {', '.join(_cite(p) for p in see_also)}" if see_also else ""
        lead = f"According to {_cite(used[0])}: "
        also = ""
        if second is not None:
            room = (MAX_ANSWER_CHARS - len(lead) - len(tail)) // 3
            also = f"\n\nAlso, from {_cite(used[1])}: {second[1].render()}"
            if len(also) > room:
                also = ""
                del used[1]
        body = fit(excerpt, MAX_ANSWER_CHARS - len(lead) - len(also) - len(tail), weights)
        if not body:
            lead = f"See {_cite(used[0])}."
        elif body.startswith(("- ", "```", "~~~")):
            lead = lead.rstrip() + "\n"
        return Answer(text=shorten(lead + body + also + tail, MAX_ANSWER_CHARS), sources=tuple(used))

    def _rank(
        self,
        query: Mapping[str, float],
        phrase: Sequence[str],
        k: int,
        vector: Vectors | None = None,
        before: Vectors | None = None,
        page: int | None = None,
    ) -> tuple[list[tuple[int, float]], Signals]:
        """Up to `k` (passage number, score) pairs with a positive score, best first, and what
        the refusal rule weighs. By words, by the question's `vector` (with the one it follows,
        `before`), or both fused, as the mode says; fused, a follow-up's passages of the
        document it follows (`page`) are lifted."""
        index = self.index
        if not index.passage_count or (not query and vector is None) or k <= 0:
            return [], Signals()
        lexical = lexical_scores(index, query, phrase)
        if vector is None or index.vectors is None or self.mode == "lexical":
            ranked = [(n, float(lexical[n])) for n in top(lexical, k)]
            return ranked, Signals(None, tuple(n for n, _ in ranked))
        similarity: Scores = (index.vectors @ vector).astype(np.float64)
        leaned = None
        if before is not None:
            earlier = index.vectors @ before
            leaned = float(earlier.max())
            similarity = similarity + BEFORE_WEIGHT * earlier
        if self.mode == "vector":
            scores = similarity
        elif self.mode == "rrf":
            scores = rank_fuse(lexical, similarity)
        else:
            scores = rerank(index, query, lexical, similarity, fuse(lexical, similarity, index))
            if page is not None:
                scores = lift(scores, index, page)
        ranked = [(n, float(scores[n])) for n in top(scores, k)]
        return ranked, Signals(similarity, tuple(n for n, _ in ranked), before is not None, leaned)

    def _idf(self, term: str) -> float:
        """The term's IDF among passage texts (highest for a term no passage holds)."""
        return self.index.body.idf(self.index.term(term))

    def _covers(self, ranked: Sequence[tuple[int, float]], own: Sequence[str]) -> bool:
        """Whether one of the top passages holds enough of the question's own informative weight.

        Enough is `MIN_COVERAGE` of the IDF of the question's distinct terms (a term the corpus
        lacks weighs most), or `MIN_SHARED_COVERAGE` when at least two of them meet in the passage.
        """
        distinct = set(own)
        if not distinct:
            return True
        idf = {term: self._idf(term) for term in distinct}
        total = sum(idf.values())
        for n, _ in ranked[:_COVERAGE_DEPTH]:
            held = [term for term in distinct if self.index.holders.holds(self.index.term(term), n)]
            share = sum(idf[term] for term in held) / total
            if share >= MIN_COVERAGE or (len(held) >= 2 and share >= MIN_SHARED_COVERAGE):
                return True
        return False

    def _second(
        self, ranked: Sequence[tuple[int, float]], excerpt: Excerpt, own: Sequence[str]
    ) -> tuple[int, Excerpt] | None:
        """The next passage worth quoting too: close behind the best one, from another section,
        with a sentence holding much of the question's weight that the first excerpt misses."""
        weights = {term: self._idf(term) for term in own}
        if len(weights) < 2:
            return None
        missing = {t: w for t, w in weights.items() if t not in excerpt.covered}
        enough = _SECOND_SHARE * sum(weights.values())
        if sum(missing.values()) < enough:
            return None
        first = self.index.passage(ranked[0][0])
        for position, (n, score) in enumerate(ranked[1:3], start=1):
            passage = self.index.passage(n)
            if (passage.source, passage.heading) == (first.source, first.heading):
                continue
            if score < _SECOND_SCORE * ranked[0][1]:
                return None
            extra = choose(self._units_of(n), missing, opening=False, limit=1)
            if sum(missing[t] for t in extra.covered) >= enough:
                return position, extra
            return None
        return None

    def _units_of(self, n: int) -> tuple[Unit, ...]:
        units = self._units.get(n)
        if units is None:
            units = self._units[n] = units_of(self.index.passage(n).text)
        return units

    def _passage(self, n: int, score: float) -> Passage:
        found = self.index.passage(n)
        return Passage(
            source=found.source,
            heading=found.heading,
            text=found.text,
            score=score,
            index_version=self.index.version or None,
            url=self.index.url(n),
        )


def _cite(passage: Passage) -> str:
    """`file (heading)`, or the file alone for the text before its first heading."""
    if passage.heading == passage.source.rsplit("/", 1)[-1]:
        return passage.source
    return f"{passage.source} ({passage.heading})"
