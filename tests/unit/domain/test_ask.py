"""AskService: the history rule, ids, bounds, expiry, instructions, receipts and concurrency."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import pytest
from support.exchange import Exchange
from support.stores import read

from app.adapters.engines.echo import EchoEngine
from app.domain.ask import AskRequest, AskService, HistoryLimits
from app.domain.conversation import CONVERSATION_ID_PATTERN, Conversation, Turn
from app.domain.ports import (
    Answer,
    Document,
    Passage,
    PastExchange,
    Progress,
    Stored,
    Usage,
    VersionConflict,
)
from app.domain.principal import Principal
from app.errors import Conflict, EngineFailed, InvalidInput, NotFound, QuotaExceeded, Unavailable
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio

TENANT = "tenant-1"
ALICE = Principal(oid="oid-alice", tid=TENANT, scopes=frozenset({"access_as_user"}), expires_at=2e9)
BOB = Principal(oid="oid-bob", tid=TENANT, scopes=frozenset({"access_as_user"}), expires_at=2e9)
ALICE_ELSEWHERE = dataclasses.replace(ALICE, tid="tenant-2")


class FakeClock:
    """A clock the tests move by hand."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingStore:
    """Delegates to a `MemoryStore` and counts every call, so tests can prove "zero store calls".

    With `yielding=True` every call first lets other tasks run, so concurrent asks interleave
    between reading a conversation and writing it back.
    """

    def __init__(self, inner: MemoryStore, *, yielding: bool = False) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.yielding = yielding

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    async def _enter(self, name: str) -> None:
        self.calls[name] += 1
        if self.yielding:
            await anyio.lowlevel.checkpoint()

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        await self._enter("get")
        return await self.inner.get(oid, conversation_id)

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        await self._enter("create")
        return await self.inner.create(conversation, max_conversations=max_conversations)

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        await self._enter("replace")
        return await self.inner.replace(conversation, if_match=if_match)

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        await self._enter("delete")
        return await self.inner.delete(oid, conversation_id, if_match=if_match)

    async def check(self) -> None:
        await self._enter("check")

    async def aclose(self) -> None:
        await self._enter("aclose")


class InterruptingStore(CountingStore):
    """On the first `replace`, another writer's turn lands just before ours, which then conflicts."""

    def __init__(self, inner: MemoryStore, clock: FakeClock) -> None:
        super().__init__(inner)
        self.clock = clock
        self.interrupted = False

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        if not self.interrupted:
            self.interrupted = True
            found = await self.inner.get(conversation.oid, conversation.conversation_id)
            assert found is not None
            current, etag = found
            other = Turn(current.next_turn_number, "other writer", "other answer", self.clock.now)
            await self.inner.replace(
                dataclasses.replace(
                    current,
                    turns=(*current.turns, other),
                    version=current.version + 1,
                ),
                if_match=etag,
            )
            self.calls["replace"] += 1
            raise VersionConflict(conversation.key)
        return await super().replace(conversation, if_match=if_match)


@dataclass(frozen=True)
class EngineCall:
    question: str
    history: tuple[Exchange, ...]
    instructions: str | None


class RecordingEngine:
    """Answers like `EchoEngine` and records what it was given; optionally yields first."""

    name = "recording"

    def __init__(self, *, yielding: bool = False) -> None:
        self.calls: list[EngineCall] = []
        self.searches: list[tuple[str, int]] = []
        self.progress: list[Progress | None] = []
        self.yielding = yielding
        #: Answered (or raised) instead of the echo, once each, in order.
        self.scripted: list[Answer | Exception] = []
        self._echo = EchoEngine()

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        self.calls.append(
            EngineCall(question, tuple(Exchange(h.question, h.answer) for h in history), instructions)
        )
        self.progress.append(progress)
        if self.yielding:
            await anyio.lowlevel.checkpoint()
        if self.scripted:
            scripted = self.scripted.pop(0)
            if isinstance(scripted, Exception):
                raise scripted
            return scripted
        return await self._echo.answer(question, history, instructions)

    async def fetch(self, source: str, max_chars: int) -> Document | None:
        text = "Whole guide text."
        return Document(source, "Guide", text[:max_chars], len(text)) if source == "guide.md" else None

    async def search(self, text: str, max_results: int) -> list[Passage]:
        self.searches.append((text, max_results))
        return [Passage("guide.md", "Heading", f"about {text}", 1.0)]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def store(memory: MemoryStore) -> CountingStore:
    return CountingStore(memory)


@pytest.fixture
def engine() -> RecordingEngine:
    return RecordingEngine()


@pytest.fixture
def service(store: CountingStore, engine: RecordingEngine, clock: FakeClock) -> AskService:
    return AskService(store, engine, clock=clock)


def stored_key(memory: MemoryStore, principal: Principal, conversation_id: str) -> str:
    """The key `MemoryStore` keeps the conversation under (read from its items)."""
    keys = [key for key, item in memory._items.items() if item.conversation.oid == principal.oid]
    assert keys == [f"mcp:{principal.oid}:{conversation_id}"]
    return keys[0]


# --- the history rule --------------------------------------------------------------------------


async def test_signed_in_with_id_creates_then_continues(
    service: AskService, engine: RecordingEngine, memory: MemoryStore
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

    assert engine.calls[1].history == (Exchange("What is Anvil?", "Echo: What is Anvil?"),)
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
    service: AskService, store: CountingStore, engine: RecordingEngine
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


@pytest.mark.parametrize("principal", [ALICE, None], ids=["signed-in", "anonymous"])
@pytest.mark.parametrize("conversation_id", ["", "a b", "x" * 65, "a/b", "ü", "a:b", "a\n"])
async def test_invalid_conversation_id_is_refused_naming_the_rule(
    service: AskService, store: CountingStore, principal: Principal | None, conversation_id: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        await service.ask(principal, AskRequest("Hello?", conversation_id=conversation_id))

    assert CONVERSATION_ID_PATTERN == "^[A-Za-z0-9._-]{1,64}$"
    assert "^[A-Za-z0-9._-]{1,64}$" in refused.value.message
    assert store.total == 0


@pytest.mark.parametrize("conversation_id", ["a", "A.b_c-9", "x" * 64])
async def test_valid_conversation_id_edge_cases_are_accepted(
    service: AskService, memory: MemoryStore, conversation_id: str
) -> None:
    result = await service.ask(ALICE, AskRequest("Hello?", conversation_id=conversation_id))

    assert result.created is True
    assert result.conversation_id == conversation_id
    assert await read(memory, ALICE.oid, conversation_id) is not None


@pytest.mark.parametrize("question", ["", "   ", "\n\t "])
async def test_empty_question_is_refused(service: AskService, store: CountingStore, question: str) -> None:
    with pytest.raises(InvalidInput, match="question must not be empty"):
        await service.ask(ALICE, AskRequest(question, conversation_id="conv-1"))
    assert store.total == 0


async def test_too_long_question_is_refused_naming_the_limit(
    store: CountingStore, engine: RecordingEngine, clock: FakeClock
) -> None:
    service = AskService(store, engine, max_question_chars=100, clock=clock)

    with pytest.raises(InvalidInput) as refused:
        await service.ask(ALICE, AskRequest("x" * 101, conversation_id="conv-1"))

    assert "101" in refused.value.message
    assert "100" in refused.value.message
    assert store.total == 0
    assert engine.calls == []
    accepted = await service.ask(ALICE, AskRequest("x" * 100, conversation_id="conv-1"))
    assert accepted.turn == 1


# --- who owns a conversation -------------------------------------------------------------------


async def test_another_user_with_the_same_id_starts_fresh(
    service: AskService, engine: RecordingEngine, memory: MemoryStore
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
    assert alice_call.history == (Exchange("Alice's secret question", "Echo: Alice's secret question"),)


async def test_same_user_in_another_tenant_is_refused_and_nothing_changes(
    service: AskService, engine: RecordingEngine, memory: MemoryStore
) -> None:
    await service.ask(ALICE, AskRequest("First", conversation_id="conv-1"))
    before = await read(memory, ALICE.oid, "conv-1")

    with pytest.raises(Conflict, match="conv-1"):
        await service.ask(ALICE_ELSEWHERE, AskRequest("From elsewhere", conversation_id="conv-1"))

    assert await read(memory, ALICE.oid, "conv-1") == before
    assert [call.question for call in engine.calls] == ["First"]


# --- bounds ------------------------------------------------------------------------------------


async def test_turn_bound_keeps_the_newest_turns_and_counts_dropped_ones(
    store: CountingStore, engine: RecordingEngine, memory: MemoryStore, clock: FakeClock
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
    store: CountingStore, engine: RecordingEngine, memory: MemoryStore, clock: FakeClock
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


async def test_instructions_bind_at_creation(service: AskService, engine: RecordingEngine) -> None:
    first = await service.ask(
        ALICE, AskRequest("first", conversation_id="conv-1", instructions="Answer in French.")
    )
    second = await service.ask(ALICE, AskRequest("second", conversation_id="conv-1"))

    assert first.created is True
    assert [call.instructions for call in engine.calls] == ["Answer in French.", "Answer in French."]
    assert second.answer.endswith("[instructions: Answer in French.]")


async def test_instructions_for_an_existing_conversation_are_refused(
    service: AskService, engine: RecordingEngine, memory: MemoryStore
) -> None:
    await service.ask(ALICE, AskRequest("first", conversation_id="conv-1"))
    before = await read(memory, ALICE.oid, "conv-1")

    with pytest.raises(Conflict, match="instructions bind when a conversation is created"):
        await service.ask(ALICE, AskRequest("second", conversation_id="conv-1", instructions="Be brief."))

    assert await read(memory, ALICE.oid, "conv-1") == before
    assert len(engine.calls) == 1


# --- clientRequestId ---------------------------------------------------------------------------


async def test_retry_with_same_key_and_arguments_replays_without_appending(
    service: AskService, engine: RecordingEngine, memory: MemoryStore
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
    store: CountingStore, engine: RecordingEngine, memory: MemoryStore, clock: FakeClock
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


@pytest.mark.parametrize("client_request_id", ["", "a b", "x" * 65, "a/b"])
async def test_invalid_client_request_id_is_refused(
    service: AskService, store: CountingStore, client_request_id: str
) -> None:
    with pytest.raises(InvalidInput, match="clientRequestId"):
        await service.ask(
            ALICE, AskRequest("Hello?", conversation_id="conv-1", client_request_id=client_request_id)
        )
    assert store.total == 0


# --- concurrency -------------------------------------------------------------------------------


async def test_a_lost_write_is_reapplied_after_the_other_writers_turn(
    memory: MemoryStore, clock: FakeClock, engine: RecordingEngine
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
    engine = RecordingEngine(yielding=True)
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


async def test_model_usage_is_returned_stored_with_the_turn_and_replayed(
    service: AskService, engine: RecordingEngine, memory: MemoryStore
) -> None:
    engine.scripted.append(Answer("Modelled.", usage=Usage(120, 30)))
    request = AskRequest("q", "c-usage", client_request_id="r-1")
    result = await service.ask(ALICE, request)
    assert result.usage == Usage(120, 30)
    stored = await read(memory, ALICE.oid, "c-usage")
    assert (stored.turns[0].input_tokens, stored.turns[0].output_tokens) == (120, 30)
    replay = await service.ask(ALICE, request)
    assert replay.note is not None and replay.note.startswith("Replayed")
    assert replay.usage == Usage(120, 30)


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


async def test_a_user_at_the_quota_cannot_create_one_more_but_keeps_the_others(
    memory: MemoryStore, engine: RecordingEngine, clock: FakeClock
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


async def test_writers_of_one_conversation_take_turns_and_never_conflict_with_each_other(
    memory: MemoryStore, clock: FakeClock
) -> None:
    store = CountingStore(memory, yielding=True)
    service = AskService(store, RecordingEngine(yielding=True), clock=clock)
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
    everyone_answering = anyio.Event()
    answering = 0

    class WaitingEngine(RecordingEngine):
        """Answers only once all five asks are answering at the same time."""

        async def answer(
            self,
            question: str,
            history: Sequence[PastExchange],
            instructions: str | None = None,
            *,
            progress: Progress | None = None,
        ) -> Answer:
            nonlocal answering
            answering += 1
            if answering == 5:
                everyone_answering.set()
            await everyone_answering.wait()
            return await super().answer(question, history, instructions, progress=progress)

    await AskService(memory, RecordingEngine(), clock=clock).ask(ALICE, AskRequest("first", "parallel"))
    service = AskService(memory, WaitingEngine(), clock=clock)
    with anyio.fail_after(5):  # a lock held around the engine would deadlock here
        async with anyio.create_task_group() as group:
            for n in range(5):
                group.start_soon(service.ask, ALICE, AskRequest(f"q{n}", "parallel"))
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
        OtherProcessStore(memory), RecordingEngine(), clock=clock, backoff=lambda n: waits.append(n) or 0
    )
    await service.ask(ALICE, AskRequest("first", "c-backoff"))
    assert (await service.ask(ALICE, AskRequest("second", "c-backoff"))).turn == 2
    # The first retry follows at once (the winner was most likely a writer of this process);
    # later ones wait, for longer and longer bounds.
    assert waits == [2, 3]
