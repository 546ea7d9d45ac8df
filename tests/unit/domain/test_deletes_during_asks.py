"""A conversation deleted while asks on it are being answered: nothing deleted comes back, and
every turn acknowledged after the delete is kept exactly once (issue: deleted turns returned)."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from app.domain.ask import AskRequest, AskResult, AskService
from app.domain.lifecycle import ConversationService
from app.domain.ports import Answer, Document, Passage, PastExchange, Progress
from app.domain.principal import Principal
from app.domain.turn_queue import TurnQueue
from app.errors import QuotaExceeded
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio

ALICE = Principal(oid="alice", tid="tenant-1", scopes=frozenset({"access_as_user"}), expires_at=2e9)


class GatedEngine:
    """Answers once `gate` is set, so a test can act while answers are being written."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.waiting = 0

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        self.waiting += 1
        await self.gate.wait()
        return Answer(f"answer to {question}")

    async def search(self, text: str, max_results: int) -> list[Passage]:
        return []

    async def fetch(self, source: str, max_chars: int) -> Document | None:
        return None


class Services:
    def __init__(self, *, max_conversations: int | None = None) -> None:
        self.store = MemoryStore()
        self.engine = GatedEngine()
        writers = TurnQueue()
        self.asks = AskService(self.store, self.engine, max_conversations=max_conversations, writers=writers)
        self.conversations = ConversationService(
            self.store, ttl_seconds=3600, max_conversations=max_conversations, writers=writers
        )

    async def questions(self, conversation_id: str = "c") -> list[str]:
        _, turns = await self.conversations.get(ALICE, conversation_id)
        return [t.question for t in turns]

    async def wait_for_answers(self, count: int) -> None:
        while self.engine.waiting < count:
            await anyio.lowlevel.checkpoint()


async def seed(services: Services, *questions: str) -> None:
    services.engine.gate.set()
    for question in questions:
        await services.asks.ask(ALICE, AskRequest(question, "c"))
    services.engine.gate = anyio.Event()
    services.engine.waiting = 0


async def test_an_ask_whose_conversation_was_deleted_meanwhile_starts_it_again_with_only_its_turn() -> None:
    services = Services()
    await seed(services, "OLD-1", "OLD-2", "OLD-3")
    results: list[AskResult] = []

    async def ask() -> None:
        results.append(await services.asks.ask(ALICE, AskRequest("NEW-1", "c")))

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        await services.wait_for_answers(1)
        assert await services.conversations.delete(ALICE, "c") is True
        services.engine.gate.set()
    (result,) = results
    assert (result.turn, result.created) == (1, True)
    assert result.note is not None and "was deleted while this answer was written" in result.note
    assert await services.questions() == ["NEW-1"]


async def test_seven_asks_racing_a_delete_keep_all_seven_turns_and_none_of_the_deleted_ones() -> None:
    services = Services()
    await seed(services, "OLD-1", "OLD-2", "OLD-3")
    results: list[AskResult] = []

    async def ask(n: int) -> None:
        results.append(await services.asks.ask(ALICE, AskRequest(f"NEW-{n}", "c")))

    async with anyio.create_task_group() as group:
        for n in range(1, 8):
            group.start_soon(ask, n)
        await services.wait_for_answers(7)
        assert await services.conversations.delete(ALICE, "c") is True
        services.engine.gate.set()
    stored = await services.questions()
    assert sorted(stored) == sorted(f"NEW-{n}" for n in range(1, 8))
    assert sorted(r.turn for r in results if r.turn is not None) == list(range(1, 8))
    _, turns = await services.conversations.get(ALICE, "c")
    assert [t.number for t in turns] == list(range(1, 8))
    assert sum(r.created for r in results) == 1


async def test_a_retry_after_a_delete_does_not_replay_the_deleted_turn() -> None:
    services = Services()
    services.engine.gate.set()
    first = await services.asks.ask(ALICE, AskRequest("Q", "c", client_request_id="r1"))
    assert first.turn == 1
    assert await services.conversations.delete(ALICE, "c") is True
    again = await services.asks.ask(ALICE, AskRequest("Q", "c", client_request_id="r1"))
    assert again.note is None or "Replayed" not in again.note
    assert (again.turn, again.created) == (1, True)
    assert await services.questions() == ["Q"]


async def test_a_writer_queued_behind_one_whose_conversation_was_deleted_starts_from_the_store() -> None:
    services = Services()
    await seed(services, "OLD-1")
    results: list[AskResult] = []

    async def ask(question: str) -> None:
        results.append(await services.asks.ask(ALICE, AskRequest(question, "c")))

    async with anyio.create_task_group() as group:
        group.start_soon(ask, "NEW-1")
        group.start_soon(ask, "NEW-2")
        await services.wait_for_answers(2)
        services.engine.gate.set()
        # Let the first writer land, then delete before the second one writes.
        while not results:
            await anyio.lowlevel.checkpoint()
        await services.conversations.delete_all(ALICE)
    remaining = await services.conversations.list(ALICE)
    for summary in remaining.items:
        assert "OLD-1" not in await services.questions(summary.conversation_id)


async def test_asks_creating_conversations_at_once_never_pass_the_quota() -> None:
    services = Services(max_conversations=3)
    services.engine.gate.set()
    outcomes: list[object] = []

    async def ask(n: int) -> None:
        try:
            outcomes.append(await services.asks.ask(ALICE, AskRequest("Q", f"c-{n}")))
        except QuotaExceeded as refused:
            outcomes.append(refused)

    async with anyio.create_task_group() as group:
        for n in range(30):
            group.start_soon(ask, n)
    assert sum(isinstance(o, AskResult) for o in outcomes) == 3
    assert await services.store.count("alice", "tenant-1") == 3
    refusal = next(o for o in outcomes if isinstance(o, QuotaExceeded))
    assert "delete some" in str(refusal)


async def test_starts_at_once_never_pass_the_quota() -> None:
    services = Services(max_conversations=3)
    outcomes = []

    async def start() -> None:
        try:
            outcomes.append(await services.conversations.start(ALICE))
        except QuotaExceeded as refused:
            outcomes.append(refused)

    async with anyio.create_task_group() as group:
        for _ in range(30):
            group.start_soon(start)
    assert sum(not isinstance(o, QuotaExceeded) for o in outcomes) == 3
    assert await services.store.count("alice", "tenant-1") == 3
