"""`search` and `fetch` read the served knowledge index; with none (the echo engine), search finds
nothing and fetch knows no source. Neither touches the conversation store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.knowledge import FixedKnowledge

from app.domain.ask import AskService
from app.domain.lifecycle import ConversationService
from app.domain.ports import Document, KnowledgeIndex, Passage
from app.engines.echo import EchoEngine
from app.errors import NotFound
from app.operations.catalog import OPERATIONS
from app.operations.operation import Call
from app.settings import Settings
from app.stores.memory import MemoryStore
from app.telemetry.instruments import Telemetry

pytestmark = pytest.mark.anyio

BY_NAME = {operation.name: operation for operation in OPERATIONS}
PASSAGES = [Passage("guide.md", "Heading", f"about {n}", 1.0 / (n + 1), "v1") for n in range(8)]
GUIDE = Document("guide.md", "Guide", "Whole guide text.", 17)


@dataclass
class Services:
    service: AskService
    conversations: ConversationService
    knowledge: KnowledgeIndex | None
    telemetry: Telemetry


def call(knowledge: KnowledgeIndex | None) -> Call:
    store = MemoryStore()
    services = Services(
        AskService(store, EchoEngine()),
        ConversationService(store, ttl_seconds=60),
        knowledge,
        Telemetry.off(),
    )
    return Call(services, None)


async def run(
    name: str, knowledge: KnowledgeIndex | None, arguments: dict[str, object], tmp_path: Path
) -> Any:
    operation = BY_NAME[name]
    return await operation.handler(call(knowledge), operation.parse(arguments, Settings(data_dir=tmp_path)))


async def test_search_hands_the_words_and_the_count_to_the_index(tmp_path: Path) -> None:
    knowledge = FixedKnowledge(PASSAGES)
    found = await run("search", knowledge, {"searchText": "anvil", "maxResults": 3}, tmp_path)
    assert knowledge.searches == [("anvil", 3)]
    assert [hit.text for hit in found.results] == ["about 0", "about 1", "about 2"]
    assert found.indexVersion == "v1"


async def test_without_an_index_search_finds_nothing_and_fetch_knows_no_source(tmp_path: Path) -> None:
    found = await run("search", None, {"searchText": "anvil"}, tmp_path)
    assert found.results == [] and found.indexVersion is None
    with pytest.raises(NotFound, match=r"No source named 'guide\.md'"):
        await run("fetch", None, {"source": "guide.md"}, tmp_path)


async def test_fetch_returns_a_known_source_cut_to_size_and_refuses_others(tmp_path: Path) -> None:
    knowledge = FixedKnowledge(documents=[GUIDE])
    document = await run("fetch", knowledge, {"source": "guide.md", "maxChars": 100}, tmp_path)
    assert (document.text, document.totalChars, document.truncated) == ("Whole guide text.", 17, False)
    with pytest.raises(NotFound, match=r"No source named 'nope\.md'"):
        await run("fetch", knowledge, {"source": "nope.md"}, tmp_path)
