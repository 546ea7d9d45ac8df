"""The per-user conversation quota on the Cosmos DB store, against the Cosmos DB-compatible test
server: parallel creations over two store instances (two clients, as two replicas have), slots
given back by deletes, by conversations that vanish and by conversations that expire, the quota
item kept out of every listing, the requests one creation costs. Two `anvil serve` processes
under the quota are in `test_quota_limit.py`.

The store's reasoning (why the limit holds under any interleaving) is in `CosmosStore`'s
docstring; `tests/unit/test_cosmos_quota_unit.py` drives it through interleavings and lagging
replicas that this server cannot produce.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from support.cosmos import CosmosServer, run_cosmos_server

from app.domain.conversation import Conversation, Turn
from app.domain.ports import QuotaFull
from app.settings import Settings
from app.stores.cosmos import CosmosStore

OID, TID = "oid-quota", "tenant-quota"
QUOTA_ID = f"quota:{OID}:{TID}"
ZERO = {"read": 0, "query": 0, "create": 0, "replace": 0, "upsert": 0, "patch": 0, "delete": 0}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def cosmos() -> Iterator[CosmosServer]:
    with run_cosmos_server() as server:
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def settings(cosmos: CosmosServer) -> Settings:
    return Settings(
        store="cosmos",
        cosmos_endpoint=cosmos.endpoint,
        cosmos_key=SecretStr(cosmos.key),
        cosmos_container=f"quota-{uuid.uuid4().hex[:12]}",
        cosmos_create_if_missing=True,
    )


@pytest.fixture
async def replicas(settings: Settings, clock: Clock) -> AsyncIterator[tuple[CosmosStore, CosmosStore]]:
    """Two stores on one container, each with a client of its own."""
    first = await CosmosStore.open(settings, clock, ttl_seconds=settings.history_ttl_seconds)
    second = await CosmosStore.open(settings, clock, ttl_seconds=settings.history_ttl_seconds)
    try:
        yield first, second
    finally:
        await first.aclose()
        await second.aclose()


@pytest.fixture
async def container(cosmos: CosmosServer, settings: Settings, replicas: Any) -> AsyncIterator[Any]:
    """The same container through a third client, to change items behind the stores' backs."""
    from azure.cosmos.aio import CosmosClient

    async with CosmosClient(cosmos.endpoint, cosmos.key) as client:
        yield client.get_database_client(settings.cosmos_database).get_container_client(
            settings.cosmos_container
        )


def conversation(clock: Clock, cid: str, ttl: float = 3600.0) -> Conversation:
    return Conversation(
        oid=OID,
        tid=TID,
        conversation_id=cid,
        created_at=clock(),
        updated_at=clock(),
        expires_at=clock() + ttl,
        version=1,
        turns=(Turn(1, "What is Anvil?", "A service.", clock()),),
    )


async def listed(store: CosmosStore) -> list[str]:
    return sorted(s.conversation_id for s in (await store.list(OID, TID, limit=100)).items)


async def items(container: Any) -> dict[str, dict[str, Any]]:
    """Every item of the user's partition, the quota item and placeholders included."""
    rows = container.query_items(
        query="SELECT * FROM c WHERE c.oid = @oid",
        parameters=[{"name": "@oid", "value": OID}],
        partition_key=OID,
    )
    return {row["id"]: row async for row in rows}


def item_requests(cosmos: CosmosServer) -> dict[str, int]:
    counts = cosmos.counts()
    return {op: n for op, n in counts.items() if op in ZERO and n}


# --- the limit under concurrency ----------------------------------------------------------------


@pytest.mark.anyio
async def test_thirty_creations_at_once_on_two_replicas_create_exactly_three(
    replicas: tuple[CosmosStore, CosmosStore], container: Any, clock: Clock
) -> None:
    results = await asyncio.gather(
        *(replicas[n % 2].create(conversation(clock, f"c{n:02}"), max_conversations=3) for n in range(30)),
        return_exceptions=True,
    )

    outcomes = Counter(type(r).__name__ for r in results)
    assert outcomes == {"str": 3, "QuotaFull": 27}, results
    created = sorted(f"c{n:02}" for n, r in enumerate(results) if isinstance(r, str))
    assert await listed(replicas[0]) == created
    assert await replicas[1].count(OID, TID) == 3
    # Nothing else is left behind: the refused removed their placeholders.
    assert sorted(await items(container)) == sorted([QUOTA_ID, *(f"mcp:{OID}:{cid}" for cid in created)])


@pytest.mark.anyio
async def test_after_a_delete_exactly_one_more_can_be_created(
    replicas: tuple[CosmosStore, CosmosStore], clock: Clock
) -> None:
    first, second = replicas
    for cid in ("a", "b", "c"):
        await first.create(conversation(clock, cid), max_conversations=3)
    assert await first.delete(OID, "b") is True

    results = await asyncio.gather(
        *(replicas[n % 2].create(conversation(clock, f"d{n}"), max_conversations=3) for n in range(10)),
        return_exceptions=True,
    )

    assert Counter(type(r).__name__ for r in results) == {"str": 1, "QuotaFull": 9}
    (winner,) = (f"d{n}" for n, r in enumerate(results) if isinstance(r, str))
    assert await listed(second) == sorted(["a", "c", winner])


@pytest.mark.anyio
async def test_a_conversation_created_again_after_a_delete_goes_through_the_quota(
    replicas: tuple[CosmosStore, CosmosStore], clock: Clock
) -> None:
    first, second = replicas
    await first.create(conversation(clock, "again"), max_conversations=1)
    assert await second.delete(OID, "again") is True
    await second.create(conversation(clock, "again"), max_conversations=1)
    with pytest.raises(QuotaFull):
        await first.create(conversation(clock, "other"), max_conversations=1)
    assert await listed(first) == ["again"]


@pytest.mark.anyio
async def test_a_conversation_that_vanished_gives_its_slot_back(
    replicas: tuple[CosmosStore, CosmosStore], container: Any, clock: Clock
) -> None:
    first, second = replicas
    for cid in ("kept", "purged"):
        await first.create(conversation(clock, cid), max_conversations=2)
    with pytest.raises(QuotaFull):
        await second.create(conversation(clock, "waiting"), max_conversations=2)

    # Removed behind the store's back, as Cosmos DB's TTL purge removes an item.
    await container.delete_item(f"mcp:{OID}:purged", partition_key=OID)

    await second.create(conversation(clock, "waiting"), max_conversations=2)
    assert await listed(first) == ["kept", "waiting"]
    assert sorted((await items(container))[QUOTA_ID]["admitted"]) == ["kept", "waiting"]


@pytest.mark.anyio
async def test_an_expired_conversation_the_server_has_not_purged_gives_its_slot_back(
    replicas: tuple[CosmosStore, CosmosStore], container: Any, clock: Clock
) -> None:
    # The test server never purges: the item stays, expired, as it may for a while in Azure.
    first, second = replicas
    await first.create(conversation(clock, "short", ttl=60), max_conversations=1)
    clock.now += 61
    await second.create(conversation(clock, "next"), max_conversations=1)
    assert await listed(first) == ["next"]
    assert f"mcp:{OID}:short" not in await items(container)


@pytest.mark.anyio
async def test_conversations_made_before_the_quota_count_against_it(
    replicas: tuple[CosmosStore, CosmosStore], clock: Clock
) -> None:
    first, second = replicas
    for cid in ("old-1", "old-2"):
        await first.create(conversation(clock, cid))
    await second.create(conversation(clock, "new"), max_conversations=3)
    with pytest.raises(QuotaFull) as full:
        await first.create(conversation(clock, "over"), max_conversations=3)
    assert full.value.kept == 3


# --- the quota item ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_quota_item_is_never_listed_counted_or_deleted_as_a_conversation(
    replicas: tuple[CosmosStore, CosmosStore], container: Any, clock: Clock
) -> None:
    first, second = replicas
    for cid in ("a", "b", "c"):
        await first.create(conversation(clock, cid), max_conversations=5)
    quota = (await items(container))[QUOTA_ID]
    assert (quota["kind"], quota["tenant"], quota["ttl"]) == ("quota", TID, -1)
    assert "tid" not in quota and "expiresAt" not in quota
    assert sorted(quota["admitted"]) == ["a", "b", "c"]

    assert await listed(second) == ["a", "b", "c"]
    page = await second.list(OID, TID, limit=2)
    assert len(page.items) == 2 and page.next_cursor is not None
    rest = await second.list(OID, TID, limit=2, cursor=page.next_cursor)
    assert len(rest.items) == 1 and rest.next_cursor is None
    assert await second.count(OID, TID) == 3
    assert await second.get(OID, QUOTA_ID) is None

    assert await second.delete_all(OID, TID) == 3
    # The quota item goes with the last conversation: nothing of the user is left.
    assert await items(container) == {}
    assert await first.delete_all(OID, TID) == 0


# --- what a creation costs -------------------------------------------------------------------


@pytest.mark.anyio
async def test_requests_per_created_conversation_with_and_without_the_quota(
    cosmos: CosmosServer, replicas: tuple[CosmosStore, CosmosStore], clock: Clock
) -> None:
    """The figures of docs/storage.md, "What the quota costs", counted by the server."""
    store, _ = replicas
    cosmos.reset()
    await store.create(conversation(clock, "free"))
    assert item_requests(cosmos) == {"create": 1}

    cosmos.reset()
    await store.create(conversation(clock, "first"), max_conversations=3)
    # The user's first creation under the quota: the quota item does not exist yet, and one
    # query takes in the conversations already there ("free").
    assert item_requests(cosmos) == {"read": 1, "query": 1, "create": 2, "replace": 1}

    cosmos.reset()
    await store.create(conversation(clock, "second"), max_conversations=3)
    # Below the limit: read the quota item, write the placeholder, admit, write the conversation.
    assert item_requests(cosmos) == {"read": 1, "create": 1, "replace": 2}

    cosmos.reset()
    with pytest.raises(QuotaFull):
        await store.create(conversation(clock, "third"), max_conversations=3)
    assert item_requests(cosmos) == {"read": 1, "query": 1}

    assert await store.delete(OID, "free") is True
    cosmos.reset()
    await store.create(conversation(clock, "third"), max_conversations=3)
    # At the limit, with a slot given back by a delete: the query, and one delete proving the
    # deleted conversation's key empty.
    assert item_requests(cosmos) == {"read": 1, "query": 1, "delete": 1, "create": 1, "replace": 2}
