"""The conversation rules (concurrency, retries, instructions, lifecycle) over every store.

The same `AskService` and `ConversationService` run on each store, so each rule is shown to hold
where the data really lives: in memory, in SQLite, and in Cosmos DB (against the Cosmos
DB-compatible test server).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from support.cosmos import CosmosServer, run_cosmos_server
from support.stores import read

from app.domain.ask import AskService, HistoryLimits
from app.domain.ask_types import AskRequest
from app.domain.lifecycle import ConversationService
from app.domain.ports import ConversationStore
from app.domain.principal import Principal
from app.engines.echo import EchoEngine
from app.errors import Conflict, InvalidInput, NotFound, SignInRequired
from app.stores.cosmos import CosmosStore
from app.stores.memory import MemoryStore
from app.stores.sqlite import SqliteStore

from .store_contract import FakeClock
from .test_cosmos_store import cosmos_settings

pytestmark = pytest.mark.anyio

ALICE = Principal("oid-alice", "tenant-1", frozenset({"access_as_user"}), 9e9, "alice")
BOB = Principal("oid-bob", "tenant-1", frozenset({"access_as_user"}), 9e9, "bob")
TTL = 3600


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def cosmos_server() -> Iterator[CosmosServer]:
    with run_cosmos_server() as server:
        yield server


@pytest.fixture(params=["memory", "sqlite", "cosmos"])
async def store(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[ConversationStore]:
    opened: ConversationStore
    if request.param == "memory":
        opened = MemoryStore(clock)
    elif request.param == "sqlite":
        opened = await SqliteStore.open(tmp_path / "rules.sqlite3", clock)
    else:
        server: CosmosServer = request.getfixturevalue("cosmos_server")
        settings = cosmos_settings(server, f"rules-{uuid.uuid4().hex[:12]}")
        opened = await CosmosStore.open(settings, clock, ttl_seconds=settings.history_ttl_seconds)
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
def asks(store: ConversationStore, clock: FakeClock) -> AskService:
    return AskService(store, EchoEngine(), limits=HistoryLimits(ttl_seconds=TTL), clock=clock)


@pytest.fixture
def conversations(store: ConversationStore, clock: FakeClock) -> ConversationService:
    return ConversationService(store, ttl_seconds=TTL, clock=clock)


# --- concurrency ------------------------------------------------------------------------------


async def test_twenty_concurrent_turns_are_all_kept_in_one_order(
    asks: AskService, conversations: ConversationService, store: ConversationStore
) -> None:
    results = {}

    async def ask(i: int) -> None:
        results[i] = await asks.ask(ALICE, AskRequest(f"question {i}", "busy"))

    async with anyio.create_task_group() as group:
        for i in range(20):
            group.start_soon(ask, i)

    assert sorted(r.turn for r in results.values() if r.turn) == list(range(1, 21))
    stored = await read(store, ALICE.oid, "busy")
    assert stored is not None and stored.version == 20
    assert [t.number for t in stored.turns] == list(range(1, 21))
    assert sorted(t.question for t in stored.turns) == sorted(f"question {i}" for i in range(20))
    for i, result in results.items():  # each caller got the turn that holds its own question
        assert stored.turns[result.turn - 1].question == f"question {i}"  # type: ignore[operator]


# --- clientRequestId ---------------------------------------------------------------------------


async def test_a_retried_call_is_answered_once(asks: AskService, store: ConversationStore) -> None:
    request = AskRequest("once only", "retries", client_request_id="req-42")
    first = await asks.ask(ALICE, request)
    replays = [await asks.ask(ALICE, request) for _ in range(5)]

    stored = await read(store, ALICE.oid, "retries")
    assert stored is not None and len(stored.turns) == 1
    assert all(r.turn == first.turn == 1 and r.answer == first.answer for r in replays)
    assert all(r.note is not None and "Replayed" in r.note for r in replays)


async def test_a_retry_with_other_arguments_is_refused(asks: AskService, store: ConversationStore) -> None:
    await asks.ask(ALICE, AskRequest("original", "retries", client_request_id="req-1"))
    with pytest.raises(Conflict, match="req-1"):
        await asks.ask(ALICE, AskRequest("changed", "retries", client_request_id="req-1"))
    stored = await read(store, ALICE.oid, "retries")
    assert stored is not None and [t.question for t in stored.turns] == ["original"]


async def test_a_one_shot_call_accepts_the_key_and_stores_nothing(
    asks: AskService, store: ConversationStore
) -> None:
    result = await asks.ask(ALICE, AskRequest("no id", client_request_id="req-1"))
    assert result.note is not None and "keep no receipt" in result.note
    assert (await store.list(ALICE.oid, ALICE.tid, limit=5)).items == ()


# --- instructions ------------------------------------------------------------------------------


async def test_instructions_bind_when_the_conversation_is_created(asks: AskService) -> None:
    first = await asks.ask(ALICE, AskRequest("hello", "styled", instructions="Answer in French."))
    second = await asks.ask(ALICE, AskRequest("again", "styled"))
    assert first.created is True and second.created is False
    assert "[instructions: Answer in French.]" in second.answer
    with pytest.raises(Conflict, match="instructions bind when a conversation is created"):
        await asks.ask(ALICE, AskRequest("third", "styled", instructions="Answer in German."))


# --- start_conversation ------------------------------------------------------------------------


async def test_start_mints_an_opaque_id_that_ask_continues(
    asks: AskService, conversations: ConversationService, clock: FakeClock
) -> None:
    started = await conversations.start(ALICE, instructions="Be brief.", title="Planning")
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,64}", started.conversation_id)
    assert len(started.conversation_id) >= 22  # 128 bits or more in base64url
    assert started.expires_at == clock.now + TTL and started.title == "Planning"

    first = await asks.ask(ALICE, AskRequest("first question", started.conversation_id))
    assert (first.turn, first.created) == (1, False)
    assert "[instructions: Be brief.]" in first.answer


async def test_minted_ids_do_not_repeat(conversations: ConversationService) -> None:
    ids = {(await conversations.start(ALICE)).conversation_id for _ in range(50)}
    assert len(ids) == 50


async def test_lifecycle_needs_a_signed_in_user(conversations: ConversationService) -> None:
    for call in (
        conversations.start(None),
        conversations.list(None),
        conversations.get(None, "abc"),
        conversations.delete(None, "abc"),
        conversations.delete_all(None),
    ):
        with pytest.raises(SignInRequired, match="signed-in user"):
            await call


# --- list, get, delete -------------------------------------------------------------------------


async def test_list_get_and_delete_are_scoped_to_the_caller(
    asks: AskService, conversations: ConversationService, clock: FakeClock
) -> None:
    await asks.ask(ALICE, AskRequest("a1", "alpha"))
    clock.advance(1)
    await asks.ask(ALICE, AskRequest("b1", "beta"))
    await asks.ask(ALICE, AskRequest("b2", "beta"))
    await asks.ask(BOB, AskRequest("bob's", "bobs-own"))

    page = await conversations.list(ALICE, limit=10)
    assert [(c.conversation_id, c.turns) for c in page.items] == [("beta", 2), ("alpha", 1)]

    _, turns = await conversations.get(ALICE, "beta")
    assert [(t.number, t.question) for t in turns] == [(1, "b1"), (2, "b2")]
    _, latest = await conversations.get(ALICE, "beta", limit=1)
    assert [t.question for t in latest] == ["b2"]

    assert await conversations.delete(ALICE, "beta") is True
    assert await conversations.delete(ALICE, "beta") is False
    with pytest.raises(NotFound):
        await conversations.get(ALICE, "beta")
    assert [c.conversation_id for c in (await conversations.list(BOB, limit=10)).items] == ["bobs-own"]


async def test_another_users_id_is_indistinguishable_from_a_missing_one(
    asks: AskService, conversations: ConversationService, store: ConversationStore
) -> None:
    await asks.ask(ALICE, AskRequest("private", "alices"))

    with pytest.raises(NotFound) as foreign:
        await conversations.get(BOB, "alices")
    with pytest.raises(NotFound) as missing:
        await conversations.get(BOB, "never-existed")
    assert str(foreign.value).replace("alices", "X") == str(missing.value).replace("never-existed", "X")
    assert await conversations.delete(BOB, "alices") is False
    bob = await asks.ask(BOB, AskRequest("mine now?", "alices"))
    assert bob.created is True and bob.turn == 1 and "private" not in bob.answer
    kept = await read(store, ALICE.oid, "alices")
    assert kept is not None and [t.question for t in kept.turns] == ["private"]


async def test_delete_all_removes_every_conversation_of_the_caller(
    asks: AskService, conversations: ConversationService
) -> None:
    for cid in ("one", "two", "three"):
        await asks.ask(ALICE, AskRequest("q", cid))
    await asks.ask(BOB, AskRequest("q", "one"))
    assert await conversations.delete_all(ALICE) == 3
    assert (await conversations.list(ALICE)).items == ()
    assert len((await conversations.list(BOB)).items) == 1


async def test_an_expired_conversation_behaves_as_missing(
    asks: AskService, conversations: ConversationService, clock: FakeClock
) -> None:
    await asks.ask(ALICE, AskRequest("soon gone", "ephemeral"))
    clock.advance(TTL + 1)
    with pytest.raises(NotFound, match="not found or has expired"):
        await conversations.get(ALICE, "ephemeral")
    assert (await conversations.list(ALICE)).items == ()
    assert await conversations.delete(ALICE, "ephemeral") is False
    fresh = await asks.ask(ALICE, AskRequest("back again", "ephemeral"))
    assert fresh.created is True and fresh.turn == 1


async def test_a_cursor_the_store_did_not_issue_says_what_to_change(
    conversations: ConversationService,
) -> None:
    # The arguments' own rules (limits, ids, titles) are the operations' (tests/unit/operations);
    # whether a cursor is one it issued, only the store knows.
    with pytest.raises(InvalidInput, match="nextCursor"):
        await conversations.list(ALICE, cursor="garbage")


async def test_a_replayed_first_turn_keeps_its_created_flag(
    asks: AskService, conversations: ConversationService, clock: FakeClock
) -> None:
    started = await conversations.start(ALICE)
    clock.advance(1)
    request = AskRequest("first", started.conversation_id, client_request_id="r1")
    assert (await asks.ask(ALICE, request)).created is False
    assert (await asks.ask(ALICE, request)).created is False
    own = AskRequest("first", "own-id", client_request_id="r2")
    assert (await asks.ask(ALICE, own)).created is True
    assert (await asks.ask(ALICE, own)).created is True
