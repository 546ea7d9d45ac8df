"""AskService: the history rule, ids, who owns a conversation, bounds, expiry, instructions and
the quota."""

from __future__ import annotations

import pytest
from support.ask_doubles import (
    ALICE,
    ALICE_ELSEWHERE,
    BOB,
    TENANT,
    CountingStore,
    FakeClock,
    stored_key,
)
from support.exchange import Exchange
from support.scripted_engine import EngineCall, ScriptedEngine
from support.stores import read

from app.domain.ask import AskService, HistoryLimits
from app.domain.ask_types import AskRequest
from app.engines.echo import EchoEngine
from app.errors import Conflict, QuotaExceeded
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio


# --- the history rule --------------------------------------------------------------------------


async def test_signed_in_with_id_creates_then_continues(
    service: AskService, engine: ScriptedEngine, memory: MemoryStore
) -> None:
    first = await service.ask(ALICE, AskRequest("What is Anvil?", conversation_id="conv-1"))

    assert first.created is True
    assert first.turn == 1
    assert first.conversation_id == "conv-1"
    assert first.note is None
    assert first.condensed is False
    assert first.answer == "Echo: What is Anvil?"
    assert engine.calls[0].history == ()

    second = await service.ask(ALICE, AskRequest("And how?", conversation_id="conv-1"))

    assert engine.calls[1].history == (Exchange("What is Anvil?", "Echo: What is Anvil?", ()),)
    assert second.turn == 2
    assert second.created is False
    assert second.conversation_id == "conv-1"
    assert second.note is None
    assert stored_key(memory, ALICE, "conv-1") == f"mcp:{ALICE.oid}:conv-1"
    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert [(t.number, t.question) for t in stored.turns] == [(1, "What is Anvil?"), (2, "And how?")]
    assert stored.tid == TENANT


async def test_signed_in_without_id_is_one_shot_with_no_store_calls(
    service: AskService, store: CountingStore, engine: ScriptedEngine
) -> None:
    result = await service.ask(ALICE, AskRequest("What is Anvil?"))

    assert result.conversation_id is None
    assert result.turn is None
    assert result.created is False
    assert result.condensed is False
    assert result.note is not None
    assert "No conversationId was given" in result.note
    assert result.answer == "Echo: What is Anvil?"
    assert engine.calls == [EngineCall("What is Anvil?", (), None)]
    assert store.total == 0


async def test_anonymous_with_id_is_one_shot_and_the_id_is_ignored(
    service: AskService, store: CountingStore, memory: MemoryStore
) -> None:
    result = await service.ask(None, AskRequest("What is Anvil?", conversation_id="conv-1"))

    assert result.conversation_id is None
    assert result.turn is None
    assert result.created is False
    assert result.note is not None
    assert "ignored" in result.note
    assert "not signed in" in result.note
    assert store.total == 0
    assert memory._items == {}


# --- who owns a conversation -------------------------------------------------------------------


async def test_another_user_with_the_same_id_starts_fresh(
    service: AskService, engine: ScriptedEngine, memory: MemoryStore
) -> None:
    await service.ask(ALICE, AskRequest("Alice's secret question", conversation_id="shared"))
    alice_before = await read(memory, ALICE.oid, "shared")

    bob = await service.ask(BOB, AskRequest("Bob's question", conversation_id="shared"))

    assert bob.created is True
    assert bob.turn == 1
    assert "Alice" not in bob.answer
    bob_call = engine.calls[-1]
    assert bob_call.history == ()
    assert await read(memory, ALICE.oid, "shared") == alice_before
    bob_stored = await read(memory, BOB.oid, "shared")
    assert bob_stored is not None
    assert [t.question for t in bob_stored.turns] == ["Bob's question"]

    alice_next = await service.ask(ALICE, AskRequest("Again", conversation_id="shared"))
    assert alice_next.turn == 2
    alice_call = engine.calls[-1]
    assert alice_call.history == (Exchange("Alice's secret question", "Echo: Alice's secret question", ()),)


async def test_same_user_in_another_tenant_is_refused_and_nothing_changes(
    service: AskService, engine: ScriptedEngine, memory: MemoryStore
) -> None:
    await service.ask(ALICE, AskRequest("First", conversation_id="conv-1"))
    before = await read(memory, ALICE.oid, "conv-1")

    with pytest.raises(Conflict, match="conv-1"):
        await service.ask(ALICE_ELSEWHERE, AskRequest("From elsewhere", conversation_id="conv-1"))

    assert await read(memory, ALICE.oid, "conv-1") == before
    assert [call.question for call in engine.calls] == ["First"]


# --- bounds ------------------------------------------------------------------------------------


async def test_turn_bound_keeps_the_newest_turns_and_counts_dropped_ones(
    store: CountingStore, engine: ScriptedEngine, memory: MemoryStore, clock: FakeClock
) -> None:
    service = AskService(store, engine, limits=HistoryLimits(max_turns=3), clock=clock)
    results = [
        await service.ask(ALICE, AskRequest(f"question {n}", conversation_id="conv-1")) for n in range(1, 6)
    ]

    assert [r.turn for r in results] == [1, 2, 3, 4, 5]
    assert [r.condensed for r in results] == [False, False, False, True, True]
    assert [r.note for r in results[:3]] == [None, None, None]
    assert results[3].note is not None
    assert "1 older turn was dropped" in results[3].note
    assert "(1 dropped in all)" in results[3].note
    assert results[4].note is not None
    assert "1 older turn was dropped" in results[4].note
    assert "(2 dropped in all)" in results[4].note

    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert [t.number for t in stored.turns] == [3, 4, 5]
    assert stored.dropped == 2
    assert [e.question for e in engine.calls[-1].history] == ["question 2", "question 3", "question 4"]

    sixth = await service.ask(ALICE, AskRequest("question 6", conversation_id="conv-1"))
    assert sixth.turn == 6
    assert sixth.note is not None
    assert "(3 dropped in all)" in sixth.note


async def test_byte_bound_keeps_the_newest_turns_that_fit(
    store: CountingStore, memory: MemoryStore, clock: FakeClock
) -> None:
    # With EchoEngine and a 1000-character question, turn 1 takes 1000 + 1006 + 64 = 2070 bytes
    # and each later turn 1000 + 2036 + 64 = 3100 (its answer also quotes the previous question),
    # so 6500 bytes hold two turns.
    service = AskService(store, EchoEngine(), limits=HistoryLimits(max_bytes=6500), clock=clock)
    question = "q" * 1000

    results = [await service.ask(ALICE, AskRequest(question, conversation_id="conv-1")) for _ in range(4)]

    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert [t.size() for t in stored.turns] == [3100, 3100]
    assert [t.number for t in stored.turns] == [3, 4]
    assert stored.dropped == 2
    assert [r.turn for r in results] == [1, 2, 3, 4]
    assert [r.condensed for r in results] == [False, False, True, True]
    assert results[2].note is not None
    assert "1 older turn was dropped" in results[2].note
    assert "(1 dropped in all)" in results[2].note
    assert results[3].note is not None
    assert "(2 dropped in all)" in results[3].note


async def test_byte_bound_never_drops_the_turn_just_answered(
    store: CountingStore, memory: MemoryStore, clock: FakeClock
) -> None:
    service = AskService(store, EchoEngine(), limits=HistoryLimits(max_bytes=100), clock=clock)

    await service.ask(ALICE, AskRequest("a" * 200, conversation_id="conv-1"))
    second = await service.ask(ALICE, AskRequest("b" * 200, conversation_id="conv-1"))

    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert [t.question for t in stored.turns] == ["b" * 200]
    assert second.turn == 2
    assert second.condensed is True


# --- expiry ------------------------------------------------------------------------------------


async def test_expiry_slides_with_each_turn_and_an_expired_conversation_starts_afresh(
    store: CountingStore, engine: ScriptedEngine, memory: MemoryStore, clock: FakeClock
) -> None:
    ttl = 3600
    service = AskService(store, engine, limits=HistoryLimits(ttl_seconds=ttl), clock=clock)

    await service.ask(ALICE, AskRequest("first", conversation_id="conv-1"))
    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert stored.expires_at == clock.now + ttl

    clock.now += ttl - 1
    second = await service.ask(ALICE, AskRequest("second", conversation_id="conv-1"))
    assert second.turn == 2
    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert stored.expires_at == clock.now + ttl

    clock.now += ttl
    assert await read(memory, ALICE.oid, "conv-1") is None
    third = await service.ask(ALICE, AskRequest("third", conversation_id="conv-1"))

    assert third.created is True
    assert third.turn == 1
    assert engine.calls[-1].history == ()
    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert [t.question for t in stored.turns] == ["third"]
    assert stored.expires_at == clock.now + ttl


# --- instructions ------------------------------------------------------------------------------


async def test_instructions_bind_at_creation(service: AskService, engine: ScriptedEngine) -> None:
    first = await service.ask(
        ALICE, AskRequest("first", conversation_id="conv-1", instructions="Answer in French.")
    )
    second = await service.ask(ALICE, AskRequest("second", conversation_id="conv-1"))

    assert first.created is True
    assert [call.instructions for call in engine.calls] == ["Answer in French.", "Answer in French."]
    assert second.answer.endswith("[instructions: Answer in French.]")


async def test_instructions_for_an_existing_conversation_are_refused(
    service: AskService, engine: ScriptedEngine, memory: MemoryStore
) -> None:
    await service.ask(ALICE, AskRequest("first", conversation_id="conv-1"))
    before = await read(memory, ALICE.oid, "conv-1")

    with pytest.raises(Conflict, match="instructions bind when a conversation is created"):
        await service.ask(ALICE, AskRequest("second", conversation_id="conv-1", instructions="Be brief."))

    assert await read(memory, ALICE.oid, "conv-1") == before
    assert len(engine.calls) == 1


async def test_a_user_at_the_quota_cannot_create_one_more_but_keeps_the_others(
    memory: MemoryStore, engine: ScriptedEngine, clock: FakeClock
) -> None:
    service = AskService(memory, engine, max_conversations=2, clock=clock)
    await service.ask(ALICE, AskRequest("one", "c-1"))
    await service.ask(ALICE, AskRequest("two", "c-2"))
    answered = len(engine.calls)
    with pytest.raises(QuotaExceeded, match=r"You keep 2 conversations, the most one user may keep \(2\)"):
        await service.ask(ALICE, AskRequest("three", "c-3"))
    assert len(engine.calls) == answered, "refused before the engine ran"
    assert await memory.get(ALICE.oid, "c-3") is None
    assert (await service.ask(ALICE, AskRequest("again", "c-1"))).turn == 2
    assert (await service.ask(ALICE, AskRequest("one-shot"))).conversation_id is None
    assert (await service.ask(BOB, AskRequest("bob's first", "c-3"))).created is True
    await memory.delete(ALICE.oid, "c-2")
    assert (await service.ask(ALICE, AskRequest("three", "c-3"))).created is True
