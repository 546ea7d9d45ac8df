"""Throttling and outages of Cosmos DB, injected by the test server, seen through AskService.

Nothing is ever half-written: a turn is stored entirely or not at all, a failed ask is a
retryable `Unavailable`, and asking again stores the turn exactly once.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from pydantic import SecretStr
from support.cosmos import CosmosServer, run_cosmos_server
from support.stores import read

from app.domain.ask import AskService
from app.domain.ask_types import AskRequest
from app.domain.principal import Principal
from app.engines.echo import EchoEngine
from app.errors import Unavailable
from app.settings import Settings
from app.stores.cosmos import CosmosStore

pytestmark = pytest.mark.anyio

ALICE = Principal(oid="oid-alice", tid="tenant-1", scopes=frozenset({"access_as_user"}), expires_at=4e9)
THROTTLE_RETRIES = 3


@pytest.fixture(scope="module")
def cosmos() -> Iterator[CosmosServer]:
    with run_cosmos_server() as server:
        yield server


@pytest.fixture
async def store(cosmos: CosmosServer) -> AsyncIterator[CosmosStore]:
    settings = Settings(
        store="cosmos",
        cosmos_endpoint=cosmos.endpoint,
        cosmos_key=SecretStr(cosmos.key),
        cosmos_container=f"faults-{uuid.uuid4().hex[:12]}",
        cosmos_create_if_missing=True,
        cosmos_throttle_retries=THROTTLE_RETRIES,
        cosmos_throttle_wait_seconds=5.0,
    )
    opened = await CosmosStore.open(settings, ttl_seconds=settings.history_ttl_seconds)
    cosmos.reset()
    yield opened
    cosmos.reset()
    await opened.aclose()


@pytest.fixture
def service(store: CosmosStore) -> AskService:
    return AskService(store, EchoEngine())


async def questions(store: CosmosStore, conversation_id: str) -> list[str]:
    stored = await read(store, ALICE.oid, conversation_id)
    assert stored is not None
    assert [t.number for t in stored.turns] == list(range(1, len(stored.turns) + 1))
    return [t.question for t in stored.turns]


async def test_a_throttling_storm_within_the_retry_budget_is_survived(
    cosmos: CosmosServer, service: AskService, store: CosmosStore
) -> None:
    await service.ask(ALICE, AskRequest("first", "storm"))
    cosmos.inject("read", 429, count=THROTTLE_RETRIES, retry_after_ms=5)
    cosmos.inject("replace", 429, count=THROTTLE_RETRIES, retry_after_ms=5)

    result = await service.ask(ALICE, AskRequest("second", "storm"))

    assert result.turn == 2
    assert cosmos.pending_faults() == []
    assert cosmos.counts()["faults"] == 2 * THROTTLE_RETRIES
    assert await questions(store, "storm") == ["first", "second"]


async def test_a_longer_throttling_storm_is_unavailable_with_a_retry_hint_and_changes_nothing(
    cosmos: CosmosServer, service: AskService, store: CosmosStore
) -> None:
    await service.ask(ALICE, AskRequest("first", "long-storm"))
    cosmos.inject("replace", 429, count=THROTTLE_RETRIES, retry_after_ms=5)
    # The refusal that exhausts the budget names how long to wait.
    cosmos.inject("replace", 429, count=1, retry_after_ms=2500)

    with pytest.raises(Unavailable) as raised:
        await service.ask(ALICE, AskRequest("second", "long-storm"))

    assert raised.value.retry_after == 2.5
    assert raised.value.message == "The conversation store is busy; retry in 3 s."
    assert cosmos.counts()["replace"] == THROTTLE_RETRIES + 1
    assert await questions(store, "long-storm") == ["first"]
    assert (await service.ask(ALICE, AskRequest("second", "long-storm"))).turn == 2
    assert await questions(store, "long-storm") == ["first", "second"]


async def test_a_503_that_outlasts_the_sdk_retry_leaves_no_partial_turn(
    cosmos: CosmosServer, service: AskService, store: CosmosStore
) -> None:
    await service.ask(ALICE, AskRequest("first", "outage"))
    # The SDK retries a write once after a 503; two in a row reach Anvil.
    cosmos.inject("replace", 503, count=2)

    with pytest.raises(Unavailable) as raised:
        await service.ask(ALICE, AskRequest("second", "outage"))

    assert raised.value.retry_after is not None
    assert await questions(store, "outage") == ["first"]
    assert (await service.ask(ALICE, AskRequest("second", "outage"))).turn == 2
    assert await questions(store, "outage") == ["first", "second"]


async def test_a_single_503_on_a_write_is_retried_by_the_sdk(
    cosmos: CosmosServer, service: AskService, store: CosmosStore
) -> None:
    await service.ask(ALICE, AskRequest("first", "blip"))
    cosmos.inject("replace", 503, count=1)

    assert (await service.ask(ALICE, AskRequest("second", "blip"))).turn == 2

    assert cosmos.counts()["replace"] == 2
    assert await questions(store, "blip") == ["first", "second"]


@pytest.mark.parametrize("op", ["create", "replace"])
async def test_a_write_applied_but_answered_503_is_stored_once(
    cosmos: CosmosServer, service: AskService, store: CosmosStore, op: str
) -> None:
    conversation = f"lost-response-{op}"
    if op == "replace":
        await service.ask(ALICE, AskRequest("first", conversation))
    # Cosmos DB applies the write, but its answer is lost; the SDK sends it again.
    cosmos.inject(op, 503, count=1, when="after")

    result = await service.ask(ALICE, AskRequest("latest", conversation))

    expected = ["latest"] if op == "create" else ["first", "latest"]
    assert result.turn == len(expected)
    assert cosmos.counts()[op] == 2
    assert await questions(store, conversation) == expected


async def test_a_write_whose_answers_are_all_lost_is_completed_once_by_a_retry(
    cosmos: CosmosServer, service: AskService, store: CosmosStore
) -> None:
    await service.ask(ALICE, AskRequest("first", "ambiguous"))
    cosmos.inject("replace", 503, count=2, when="after")
    request = AskRequest("second", "ambiguous", client_request_id="retry-key-1")

    with pytest.raises(Unavailable):
        await service.ask(ALICE, request)
    # The write may or may not have happened: here it did, exactly once, and whole.
    assert await questions(store, "ambiguous") == ["first", "second"]

    retried = await service.ask(ALICE, request)

    assert retried.turn == 2
    assert retried.note is not None and retried.note.startswith("Replayed")
    assert await questions(store, "ambiguous") == ["first", "second"]


async def test_a_server_that_went_away_is_unavailable_not_an_error() -> None:
    with run_cosmos_server() as doomed:
        settings = Settings(
            store="cosmos",
            cosmos_endpoint=doomed.endpoint,
            cosmos_key=SecretStr(doomed.key),
            cosmos_create_if_missing=True,
        )
        store = await CosmosStore.open(settings, ttl_seconds=settings.history_ttl_seconds)
    try:
        with pytest.raises(Unavailable) as raised:
            await store.check()
        assert raised.value.message == "The conversation store cannot be reached; retry shortly."
    finally:
        await store.aclose()
