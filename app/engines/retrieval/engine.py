"""The embedded answer engine: it ranks the served index's passages by words and by meaning and
answers from the best ones, citing them; and it serves those passages and documents to `search`
and `fetch` (the `KnowledgeIndex` port).

The room's parts: `lexical` (scores by words), `fusion` (words and meaning fused), `rerank` (the
best passages reordered), `refusal` (when the corpus does not answer), `follow_ups` (what a
question leans on), `ranking` (one index's ranking), `answers` and `excerpts` (what an answer
quotes). This module only reads the index served now and embeds the question.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

import anyio

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
from app.engines.retrieval.answers import CANDIDATES, MAX_ANSWER_CHARS, NO_MATCH_ANSWER, Quoter
from app.engines.retrieval.follow_ups import followed_page, looks_like_follow_up, read_question
from app.engines.retrieval.fusion import Ranking
from app.engines.retrieval.ranking import Ranker
from app.engines.retrieval.refusal import refuse, subject_terms
from app.errors import AnvilError
from app.knowledge.index import PassageIndex
from app.knowledge.served import ServedIndex
from app.knowledge.tokens import tokenize

__all__ = [
    "MAX_ANSWER_CHARS",
    "NO_MATCH_ANSWER",
    "RetrievalEngine",
    "looks_like_follow_up",
    "tokenize",
]

logger = logging.getLogger(__name__)

#: What an answer given with instructions says of them: quotes follow none.
INSTRUCTIONS_NOTE = (
    "The embedded engine quotes the documentation as it is written and follows none of the "
    "instructions; a language-model engine (ANVIL_ANSWER_ENGINE=openai or azure-openai) follows them."
)


class RetrievalEngine:
    """Answers from the served knowledge index (an `AnswerEngine`), and serves its passages and
    documents (a `KnowledgeIndex`).

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
        max_answer_chars: int = MAX_ANSWER_CHARS,
    ) -> None:
        if isinstance(served, PassageIndex):
            served = ServedIndex(served, None if embedder is None else embedder.name)
        self.served = served
        self.embedder = embedder
        self._mode: Ranking = ranking if embedder is not None else "lexical"
        self.max_answer_chars = max_answer_chars
        self._quoter = Quoter(self._ranker(served.index), max_answer_chars)

    @property
    def index(self) -> PassageIndex:
        """The index being served."""
        return self.served.index

    @property
    def passage_count(self) -> int:
        """How many passages the index holds."""
        return self.index.passage_count

    @property
    def document_count(self) -> int:
        """How many documents the index holds passages of (0: every question finds nothing)."""
        return self.index.document_count

    def status(self) -> IndexStatus:
        """What is served now."""
        facts = self.served.facts()
        return IndexStatus(
            facts.version,
            facts.passages,
            facts.documents,
            facts.built_at,
            embedder=facts.embedder,
            embedded=facts.embedded,
            name=facts.name,
            description=facts.description,
            behind=facts.behind,
        )

    async def search(self, text: str, max_results: int) -> list[Passage]:
        """The passages that best match `text`, best first, at most `max_results` (never zero-score)."""
        ranker = self._current().ranker
        question = read_question(text)

        def search(vectors: Vectors | None) -> list[Passage]:
            ranked, _ = ranker.rank(question, max_results, vectors)
            return [ranker.passage(n, score) for n, score in ranked]

        if not self._embeds(ranker):
            return search(None)
        return await anyio.to_thread.run_sync(lambda: search(self._vectors([text])))

    async def fetch(self, source: str, max_chars: int) -> Document | None:
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

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        """Answer from the best passages for `question`, citing them. A follow-up is ranked with
        the question it follows, and stays on the page the answer before it was given from.
        `instructions` change nothing but the answer's `note`, which says so; `progress` nothing."""
        quoter = self._current()
        read = read_question(question, history)
        page = followed_page(history, quoter.index) if read.follows is not None else None

        note = INSTRUCTIONS_NOTE if instructions else None

        def answer(vectors: Vectors | None) -> Answer:
            ranked, signals = quoter.ranker.rank(read, CANDIDATES, vectors, page)
            if refuse(quoter.index, read, signals, quoter.ranker.subject):
                return Answer(text=NO_MATCH_ANSWER, note=note)
            return replace(quoter.answer(read, ranked), note=note)

        if not self._embeds(quoter.ranker):
            return answer(None)
        texts = [question] if read.follows is None else [question, read.follows]
        # In a worker thread, with the ranking: the similarity of every passage is a product
        # over the whole index, too long to hold the event loop for on a large corpus.
        return await anyio.to_thread.run_sync(lambda: answer(self._vectors(texts)))

    def _current(self) -> Quoter:
        """The ranking and quoting of the index served now (made anew once another is swapped in)."""
        quoter = self._quoter
        index = self.served.index
        if quoter.index is not index:
            quoter = self._quoter = Quoter(self._ranker(index), self.max_answer_chars)
        return quoter

    def _ranker(self, index: PassageIndex) -> Ranker:
        """The ranking of `index`, knowing what its knowledge is called."""
        name, _ = self.served.naming.of(index)
        return Ranker(index, self._mode, subject_terms(index, name))

    def _embeds(self, ranker: Ranker) -> bool:
        """Whether questions are embedded for `ranker`'s index."""
        return self.embedder is not None and self._mode != "lexical" and ranker.index.vectors is not None

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
