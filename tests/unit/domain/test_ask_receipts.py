"""AskService: clientRequestId receipts (a retry replays, a key reused with other arguments is
refused)."""

from __future__ import annotations

import pytest
from support.ask_doubles import (
    ALICE,
    CountingStore,
    FakeClock,
)
from support.scripted_engine import ScriptedEngine
from support.stores import read

from app.domain.ask import AskService, HistoryLimits
from app.domain.ask_types import AskRequest
from app.domain.ports import (
    Answer,
    Usage,
)
from app.domain.principal import Principal
from app.errors import Conflict
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio


# --- clientRequestId ---------------------------------------------------------------------------


async def test_retry_with_same_key_and_arguments_replays_without_appending(
    service: AskService, engine: ScriptedEngine, memory: MemoryStore
) -> None:
    await service.ask(ALICE, AskRequest("first", conversation_id="conv-1"))
    request = AskRequest("second", conversation_id="conv-1", client_request_id="req-1")
    original = await service.ask(ALICE, request)

    replay = await service.ask(ALICE, request)

    assert replay.answer == original.answer
    assert replay.turn == original.turn == 2
    assert replay.created is False
    assert replay.conversation_id == "conv-1"
    assert replay.note is not None
    assert "Replayed" in replay.note
    assert len(engine.calls) == 2
    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert len(stored.turns) == 2
    assert stored.version == 2


async def test_retry_of_the_creating_ask_with_instructions_replays(
    service: AskService, memory: MemoryStore
) -> None:
    request = AskRequest("first", conversation_id="conv-1", instructions="Be brief.", client_request_id="r1")
    original = await service.ask(ALICE, request)

    replay = await service.ask(ALICE, request)

    assert replay.answer == original.answer
    assert replay.turn == 1
    assert replay.created is True
    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert len(stored.turns) == 1


async def test_a_receipt_lives_as_long_as_its_turn(
    store: CountingStore, engine: ScriptedEngine, memory: MemoryStore, clock: FakeClock
) -> None:
    # Receipts are kept on their turn: once the bounds drop that turn, the key is new again.
    service = AskService(store, engine, limits=HistoryLimits(max_turns=2), clock=clock)
    request = AskRequest("first", conversation_id="conv-1", client_request_id="req-1")
    await service.ask(ALICE, request)
    replay = await service.ask(ALICE, request)
    assert replay.note is not None and "Replayed" in replay.note
    await service.ask(ALICE, AskRequest("second", conversation_id="conv-1"))
    await service.ask(ALICE, AskRequest("third", conversation_id="conv-1"))

    again = await service.ask(ALICE, request)

    assert again.turn == 4 and (again.note is None or "Replayed" not in again.note)
    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert [t.question for t in stored.turns] == ["third", "first"]


@pytest.mark.parametrize(
    "changed",
    [
        AskRequest("another question", conversation_id="conv-1", client_request_id="req-1"),
        AskRequest("first", conversation_id="conv-1", instructions="Be brief.", client_request_id="req-1"),
    ],
    ids=["question", "instructions"],
)
async def test_same_key_with_other_arguments_is_a_conflict(
    service: AskService, memory: MemoryStore, changed: AskRequest
) -> None:
    await service.ask(ALICE, AskRequest("first", conversation_id="conv-1", client_request_id="req-1"))
    before = await read(memory, ALICE.oid, "conv-1")

    with pytest.raises(Conflict, match="req-1"):
        await service.ask(ALICE, changed)

    assert await read(memory, ALICE.oid, "conv-1") == before


@pytest.mark.parametrize("principal", [ALICE, None], ids=["no-id", "anonymous"])
async def test_one_shot_accepts_a_key_but_keeps_no_receipt(
    service: AskService, store: CountingStore, principal: Principal | None
) -> None:
    conversation_id = None if principal is not None else "conv-1"
    request = AskRequest("Hello?", conversation_id=conversation_id, client_request_id="req-1")

    result = await service.ask(principal, request)

    assert result.turn is None
    assert result.note is not None
    assert "one-shot answers keep no receipt" in result.note
    assert store.total == 0


async def test_model_usage_is_returned_stored_with_the_turn_and_replayed(
    service: AskService, engine: ScriptedEngine, memory: MemoryStore
) -> None:
    engine.script.append(Answer("Modelled.", usage=Usage(120, 30)))
    request = AskRequest("q", "c-usage", client_request_id="r-1")
    result = await service.ask(ALICE, request)
    assert result.usage == Usage(120, 30)
    stored = await read(memory, ALICE.oid, "c-usage")
    assert (stored.turns[0].input_tokens, stored.turns[0].output_tokens) == (120, 30)
    replay = await service.ask(ALICE, request)
    assert replay.note is not None and replay.note.startswith("Replayed")
    assert replay.usage == Usage(120, 30)
