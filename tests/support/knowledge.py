"""A `KnowledgeIndex` of fixed passages and documents, which remembers what it was asked."""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.ports import Document, IndexStatus, Passage


class FixedKnowledge:
    """Searching it gives the first `max_results` of `passages` whatever the words; fetching
    gives one of `documents` by source, cut to `max_chars`."""

    def __init__(self, passages: Sequence[Passage] = (), documents: Sequence[Document] = ()) -> None:
        self.passages = list(passages)
        self.documents = {document.source: document for document in documents}
        #: Each search's (text, max_results), in order.
        self.searches: list[tuple[str, int]] = []

    async def search(self, text: str, max_results: int) -> list[Passage]:
        self.searches.append((text, max_results))
        return self.passages[:max_results]

    async def fetch(self, source: str, max_chars: int) -> Document | None:
        found = self.documents.get(source)
        if found is None:
            return None
        return Document(found.source, found.title, found.text[:max_chars], len(found.text))

    def status(self) -> IndexStatus:
        return IndexStatus("fixed", len(self.passages), len(self.documents), None)
