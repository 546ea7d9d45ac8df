"""AskService and its engine: answers that fail, are condensed or report progress."""

from __future__ import annotations

import pytest
from support.ask_doubles import (
    ALICE,
    CountingStore,
)
from support.scripted_engine import ScriptedEngine
from support.stores import read

from app.domain.ask import AskService
from app.domain.ask_types import AskRequest
from app.domain.ports import Answer, Passage
from app.errors import EngineFailed, Unavailable
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio


async def test_turns_the_engine_could_not_fit_are_condensed_and_noted(
    service: AskService, engine: ScriptedEngine
) -> None:
    for question in ("one", "two"):
        await service.ask(ALICE, AskRequest(question, "c-fit"))
    engine.script.append(Answer("Short of room.", history_left_out=2))
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
    engine: ScriptedEngine,
    store: CountingStore,
    memory: MemoryStore,
    failure: Exception,
) -> None:
    await service.ask(ALICE, AskRequest("first", "c-fail"))
    before = await read(memory, ALICE.oid, "c-fail")
    writes = store.calls["create"] + store.calls["replace"]
    engine.script.append(failure)
    with pytest.raises(type(failure)):
        await service.ask(ALICE, AskRequest("second", "c-fail"))
    engine.script.append(failure)
    with pytest.raises(type(failure)):
        await service.ask(ALICE, AskRequest("first of another", "c-fail-new"))
    assert store.calls["create"] + store.calls["replace"] == writes
    assert await read(memory, ALICE.oid, "c-fail") == before
    assert await memory.get(ALICE.oid, "c-fail-new") is None


async def test_progress_reaches_the_engine_one_shot_and_in_a_conversation(
    service: AskService, engine: ScriptedEngine
) -> None:
    async def progress(value: float, total: float | None, message: str | None) -> None:
        return None

    await service.ask(ALICE, AskRequest("q"), progress=progress)
    await service.ask(ALICE, AskRequest("q", "c-progress"), progress=progress)
    await service.ask(ALICE, AskRequest("q", "c-progress"))
    assert [call.progress for call in engine.calls] == [progress, progress, None]


async def test_a_turn_keeps_the_files_its_answer_cited_each_once_in_order(
    service: AskService, engine: ScriptedEngine, memory: MemoryStore
) -> None:
    cited = (
        Passage("guide.md", "Install", "text", 2.0),
        Passage("faq.md", "Why", "text", 1.5),
        Passage("guide.md", "Upgrade", "text", 1.0),
    )
    engine.script.append(Answer("From the guide.", sources=cited))
    await service.ask(ALICE, AskRequest("How?", "c-cited"))
    engine.script.append(Answer("Nothing found."))
    await service.ask(ALICE, AskRequest("And?", "c-cited"))
    stored = await read(memory, ALICE.oid, "c-cited")
    assert [turn.sources for turn in stored.turns] == [("guide.md", "faq.md"), ()]
    # The engine is handed the turns as kept, sources and all.
    await service.ask(ALICE, AskRequest("Then?", "c-cited"))
    assert [past.sources for past in engine.calls[-1].history] == [("guide.md", "faq.md"), ()]


async def test_what_the_engine_notes_reaches_the_envelopes_note(
    service: AskService, engine: ScriptedEngine
) -> None:
    engine.script.extend([Answer("One.", note="Instructions not followed."), Answer("Two.", note="Noted.")])
    one_shot = await service.ask(ALICE, AskRequest("q"))
    assert one_shot.note is not None and one_shot.note.endswith(" Instructions not followed.")
    turn = await service.ask(ALICE, AskRequest("q", "c-noted", instructions="Be brief."))
    assert turn.note == "Noted."
