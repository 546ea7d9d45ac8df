"""AskService and its engine: search, fetch, answers that fail, are condensed or report progress."""

from __future__ import annotations

import pytest
from support.ask_doubles import (
    ALICE,
    CountingStore,
    RecordingEngine,
)
from support.stores import read

from app.domain.ask import AskService
from app.domain.ask_types import AskRequest
from app.domain.ports import (
    Answer,
    Passage,
)
from app.errors import EngineFailed, InvalidInput, NotFound, Unavailable
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio


# --- search ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   "])
async def test_search_refuses_empty_text(service: AskService, text: str) -> None:
    with pytest.raises(InvalidInput, match="searchText"):
        await service.search(text)


@pytest.mark.parametrize("max_results", [0, 51, -1])
async def test_search_refuses_max_results_out_of_range(
    service: AskService, engine: RecordingEngine, max_results: int
) -> None:
    with pytest.raises(InvalidInput, match="maxResults"):
        await service.search("anvil", max_results)
    assert engine.searches == []


@pytest.mark.parametrize("max_results", [1, 5, 50])
async def test_search_passes_valid_requests_to_the_engine(
    service: AskService, engine: RecordingEngine, store: CountingStore, max_results: int
) -> None:
    passages = await service.search("anvil", max_results)

    assert engine.searches == [("anvil", max_results)]
    assert passages == [Passage("guide.md", "Heading", "about anvil", 1.0)]
    assert store.total == 0


async def test_search_default_asks_for_five_results(service: AskService, engine: RecordingEngine) -> None:
    await service.search("anvil")
    assert engine.searches == [("anvil", 5)]


async def test_turns_the_engine_could_not_fit_are_condensed_and_noted(
    service: AskService, engine: RecordingEngine
) -> None:
    for question in ("one", "two"):
        await service.ask(ALICE, AskRequest(question, "c-fit"))
    engine.scripted.append(Answer("Short of room.", history_left_out=2))
    result = await service.ask(ALICE, AskRequest("three", "c-fit"))
    assert result.condensed is True
    assert result.note is not None
    assert "The 2 earliest turns did not fit in the answer engine's context" in result.note
    assert result.turn == 3, "nothing is dropped from storage for it"


@pytest.mark.parametrize(
    "failure",
    [Unavailable("The language model is busy; retry in 3 s.", retry_after=3), EngineFailed("failed")],
)
async def test_a_failed_answer_stores_nothing_and_changes_nothing(
    service: AskService,
    engine: RecordingEngine,
    store: CountingStore,
    memory: MemoryStore,
    failure: Exception,
) -> None:
    await service.ask(ALICE, AskRequest("first", "c-fail"))
    before = await read(memory, ALICE.oid, "c-fail")
    writes = store.calls["create"] + store.calls["replace"]
    engine.scripted.append(failure)
    with pytest.raises(type(failure)):
        await service.ask(ALICE, AskRequest("second", "c-fail"))
    engine.scripted.append(failure)
    with pytest.raises(type(failure)):
        await service.ask(ALICE, AskRequest("first of another", "c-fail-new"))
    assert store.calls["create"] + store.calls["replace"] == writes
    assert await read(memory, ALICE.oid, "c-fail") == before
    assert await memory.get(ALICE.oid, "c-fail-new") is None


async def test_progress_reaches_the_engine_one_shot_and_in_a_conversation(
    service: AskService, engine: RecordingEngine
) -> None:
    async def progress(value: float, total: float | None, message: str | None) -> None:
        return None

    await service.ask(ALICE, AskRequest("q"), progress=progress)
    await service.ask(ALICE, AskRequest("q", "c-progress"), progress=progress)
    await service.ask(ALICE, AskRequest("q", "c-progress"))
    assert engine.progress == [progress, progress, None]


async def test_fetch_returns_a_known_source_and_refuses_others(service: AskService) -> None:
    document = await service.fetch("guide.md", 5)
    assert (document.text, document.total_chars, document.truncated) == ("Whole", 17, True)
    with pytest.raises(NotFound, match=r"No source named 'nope\.md'"):
        await service.fetch("nope.md")
    with pytest.raises(InvalidInput, match="maxChars"):
        await service.fetch("guide.md", 0)
