"""AskService: concurrent writers of one conversation, in this process (the turn queue) and in
others (conflicts retried with backoff)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from support.ask_doubles import (
    ALICE,
    CountingStore,
    FakeClock,
    InterruptingStore,
)
from support.scripted_engine import ScriptedEngine
from support.stores import read

from app.domain.ask import AskService
from app.domain.ask_types import AskRequest
from app.domain.conversation import Conversation
from app.domain.ports import (
    VersionConflict,
)
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio


# --- concurrency -------------------------------------------------------------------------------


async def test_a_lost_write_is_reapplied_after_the_other_writers_turn(
    memory: MemoryStore, clock: FakeClock, engine: ScriptedEngine
) -> None:
    store = InterruptingStore(memory, clock)
    service = AskService(store, engine, clock=clock)
    await service.ask(ALICE, AskRequest("first", conversation_id="conv-1"))

    result = await service.ask(ALICE, AskRequest("mine", conversation_id="conv-1"))

    assert store.interrupted
    assert result.turn == 3
    assert result.created is False
    assert result.answer == "Echo: mine (turn 2; previous question: first)"
    assert result.note is not None
    assert "Another turn landed" in result.note
    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert [(t.number, t.question) for t in stored.turns] == [
        (1, "first"),
        (2, "other writer"),
        (3, "mine"),
    ]
    # The engine answered once; the retry reuses that answer instead of asking again.
    assert [call.question for call in engine.calls] == ["first", "mine"]


async def test_concurrent_asks_on_one_conversation_lose_and_duplicate_nothing(
    memory: MemoryStore, clock: FakeClock
) -> None:
    store = CountingStore(memory, yielding=True)
    engine = ScriptedEngine(yielding=True)
    service = AskService(store, engine, clock=clock)
    results = {}

    async def ask(n: int) -> None:
        results[n] = await service.ask(ALICE, AskRequest(f"question {n}", conversation_id="conv-1"))

    async with anyio.create_task_group() as group:
        for n in range(20):
            group.start_soon(ask, n)

    stored = await read(memory, ALICE.oid, "conv-1")
    assert stored is not None
    assert [t.number for t in stored.turns] == list(range(1, 21))
    assert sorted(t.question for t in stored.turns) == sorted(f"question {n}" for n in range(20))
    assert sorted(r.turn for r in results.values() if r.turn is not None) == list(range(1, 21))
    assert sum(r.created for r in results.values()) == 1
    for n, result in results.items():
        assert result.turn is not None
        assert stored.turns[result.turn - 1].question == f"question {n}"
    # The asks really interleaved: answers written at another version than they were read at.
    assert sum("Another turn landed" in (r.note or "") for r in results.values()) >= 10
    # Each writer started from the version the one before it wrote: one read per ask, no retries.
    assert store.calls["get"] == 20
    assert store.calls["create"] + store.calls["replace"] == 20


async def test_writers_of_one_conversation_take_turns_and_never_conflict_with_each_other(
    memory: MemoryStore, clock: FakeClock
) -> None:
    store = CountingStore(memory, yielding=True)
    service = AskService(store, ScriptedEngine(yielding=True), clock=clock)
    await service.ask(ALICE, AskRequest("first", "queue"))
    store.calls.clear()

    async with anyio.create_task_group() as group:
        for n in range(16):
            group.start_soon(service.ask, ALICE, AskRequest(f"q{n}", "queue"))

    stored = await read(memory, ALICE.oid, "queue")
    assert [t.number for t in stored.turns] == list(range(1, 18))
    # Without the queue every loser re-reads and retries against every later winner (a storm);
    # with it, each writer starts from the version the one before it wrote: no conflict at all.
    assert store.calls["replace"] == 16
    assert store.calls["get"] == 16


async def test_the_engine_never_runs_inside_the_turn_queue(memory: MemoryStore, clock: FakeClock) -> None:
    await AskService(memory, ScriptedEngine(), clock=clock).ask(ALICE, AskRequest("first", "parallel"))
    engine = ScriptedEngine(gate=anyio.Event())
    service = AskService(memory, engine, clock=clock)
    with anyio.fail_after(5):  # a lock held around the engine would deadlock here
        async with anyio.create_task_group() as group:
            for n in range(5):
                group.start_soon(service.ask, ALICE, AskRequest(f"q{n}", "parallel"))
            # The engine answers only once all five asks are answering at the same time.
            await engine.wait_for_calls(5)
            engine.gate.set()
    assert [t.number for t in (await read(memory, ALICE.oid, "parallel")).turns] == [1, 2, 3, 4, 5, 6]


async def test_conflicts_with_other_processes_back_off_before_each_retry(
    memory: MemoryStore, clock: FakeClock
) -> None:
    waits: list[int] = []

    class OtherProcessStore(CountingStore):
        """Another process wins the first three writes."""

        async def replace(self, conversation: Conversation, *, if_match: str) -> str:
            await self._enter("replace")
            if self.calls["replace"] <= 3:
                raise VersionConflict(conversation.key)
            return await self.inner.replace(conversation, if_match=if_match)

    service = AskService(
        OtherProcessStore(memory), ScriptedEngine(), clock=clock, backoff=lambda n: waits.append(n) or 0
    )
    await service.ask(ALICE, AskRequest("first", "c-backoff"))
    assert (await service.ask(ALICE, AskRequest("second", "c-backoff"))).turn == 2
    # The first retry follows at once (the winner was most likely a writer of this process);
    # later ones wait, for longer and longer bounds.
    assert waits == [2, 3]
