"""The Cosmos DB store's per-user quota, where the test server cannot reach: interleavings chosen
at random (seeded), replicas whose queries and reads lag behind the writes, creations held up
past the grace of their placeholder, lost responses, and the requests each path costs.

A fake container (`support.cosmos.FakeCosmos`) stands in for the SDK's container proxy. It
yields to the event loop around every request, so concurrent calls interleave at the points
where real requests do, and it checks after every write that the user never keeps more live
conversations than the limit. The integration tests (`tests/integration/test_cosmos_quota.py`)
run the same store against a real Cosmos DB-compatible server.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from support.cosmos import OID, TID, Clock, FakeCosmos

from app.domain.conversation import Conversation, Turn
from app.domain.ports import QuotaFull, VersionConflict
from app.errors import Unavailable
from app.stores.cosmos import CosmosStore
from app.stores.cosmos_quota import PENDING_GRACE_SECONDS, QUOTA_SLACK

pytestmark = pytest.mark.anyio

QUOTA_ID = f"quota:{OID}:{TID}"


def conversation(clock: Clock, cid: str, *, ttl: float = 3600.0, tid: str = TID) -> Conversation:
    return Conversation(
        oid=OID,
        tid=tid,
        conversation_id=cid,
        created_at=clock(),
        updated_at=clock(),
        expires_at=clock() + ttl,
        version=1,
        turns=(Turn(1, "What is Anvil?", "A service.", clock()),),
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cosmos(clock: Clock) -> FakeCosmos:
    return FakeCosmos(clock)


@pytest.fixture
def store(cosmos: FakeCosmos, clock: Clock) -> CosmosStore:
    return CosmosStore(cosmos, clock=clock)


async def create_all(store: CosmosStore, clock: Clock, ids: list[str], limit: int) -> list[str]:
    for cid in ids:
        await store.create(conversation(clock, cid), max_conversations=limit)
    return ids


# --- concurrency: never over the limit ----------------------------------------------------------


#: The seeds of the random interleavings, run a batch at a time: the seeds of a batch share one
#: event loop, each with its own container, clock, replicas and generator, so what the store
#: waits in real time (polling another creation's placeholder, the jittered backoff between
#: quota rounds) overlaps instead of adding up. A seed's own tasks still take turns as they do
#: alone: every yield puts a task at the back of the ready queue, whoever else is in it.
SEEDS = 60
BATCH = 20


@pytest.mark.parametrize("first", range(0, SEEDS, BATCH), ids=lambda f: f"seeds{f}-{f + BATCH - 1}")
async def test_random_interleavings_over_three_replicas_never_keep_more_than_the_limit(first: int) -> None:
    seeds = range(first, first + BATCH)
    outcomes = await asyncio.gather(*(interleavings(seed) for seed in seeds), return_exceptions=True)
    failed = {seed: outcome for seed, outcome in zip(seeds, outcomes, strict=True) if outcome is not None}
    if failed:
        seed, error = next(iter(failed.items()))
        raise AssertionError(f"seeds {sorted(failed)} failed; seed {seed}: {error!r}") from error


async def interleavings(seed: int) -> None:
    """One seed's creations, deletes and passing time over three replicas, then the checks."""
    rng = random.Random(seed)
    clock = Clock()
    limit = rng.randint(1, 4)
    # Queries and reads up to four writes behind, on every seed: the limit must not rest on them.
    cosmos = FakeCosmos(clock, rng, lag=4, limit=limit)
    replicas = [CosmosStore(cosmos, clock=clock) for _ in range(3)]
    ids = [f"c{i}" for i in range(8)]
    outcomes: Counter[str] = Counter()

    async def creator() -> None:
        for _ in range(6):
            store, cid = rng.choice(replicas), rng.choice(ids)
            new = conversation(clock, cid, ttl=rng.choice([5.0, 3600.0]))
            try:
                await store.create(new, max_conversations=limit)
                outcomes["created"] += 1
            except (QuotaFull, VersionConflict, Unavailable) as refused:
                outcomes[type(refused).__name__] += 1

    async def remover() -> None:
        for _ in range(8):
            store = rng.choice(replicas)
            if rng.random() < 0.15:
                await store.delete_all(OID, TID)
            else:
                await store.delete(OID, rng.choice(ids))

    async def time_passes() -> None:
        for _ in range(12):
            clock.now += rng.choice([0.0, 1.0, 6.0, PENDING_GRACE_SECONDS + 1])
            await asyncio.sleep(0)

    # A failure cancels the seed's other tasks, so none runs on beside the other seeds.
    async with asyncio.TaskGroup() as group:
        for _ in range(6):
            group.create_task(creator())
        group.create_task(remover())
        group.create_task(time_passes())

    assert cosmos.most_live <= limit
    assert outcomes["created"] > 0, outcomes
    # Nothing leaked: once every live conversation is deleted and placeholders have aged, the
    # user has the whole quota again, and not one more.
    cosmos.lag = 0
    clock.now += PENDING_GRACE_SECONDS + 1
    for cid in cosmos.live():
        assert await replicas[0].delete(OID, cid) is True
    fresh = [f"fresh-{i}" for i in range(limit)]
    for n, cid in enumerate(fresh):
        await replicas[n % 3].create(conversation(clock, cid), max_conversations=limit)
    with pytest.raises(QuotaFull):
        await replicas[1].create(conversation(clock, "one-more"), max_conversations=limit)
    assert cosmos.live() == set(fresh)


async def test_thirty_creations_at_once_on_two_replicas_create_exactly_the_limit(clock: Clock) -> None:
    cosmos = FakeCosmos(clock, random.Random(7), limit=3)
    replicas = [CosmosStore(cosmos, clock=clock), CosmosStore(cosmos, clock=clock)]
    results = await asyncio.gather(
        *(replicas[n % 2].create(conversation(clock, f"c{n}"), max_conversations=3) for n in range(30)),
        return_exceptions=True,
    )
    created = [r for r in results if isinstance(r, str)]
    assert len(created) == 3
    assert all(isinstance(r, QuotaFull) for r in results if not isinstance(r, str)), results
    assert len(cosmos.live()) == 3
    # The refused left nothing behind but the three conversations and the quota item.
    assert len(cosmos.items) == 4


async def test_a_query_that_lags_behind_a_live_conversation_does_not_free_its_slot(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await create_all(store, clock, ["first"], limit=1)
    cosmos.stale_query = {}  # a replica that has not seen the conversation yet
    cosmos.calls.clear()

    with pytest.raises(QuotaFull):
        await store.create(conversation(clock, "second"), max_conversations=1)

    # The query showed nothing; the delete that probes the key found the item there (412).
    assert ("delete_item", "mcp:oid-1:first") in cosmos.calls
    assert cosmos.live() == {"first"}


async def test_a_creation_held_up_past_the_grace_is_fenced_and_its_late_write_fails(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    key = "mcp:oid-1:slow"
    cosmos.hold[("replace_item", key)] = asyncio.Event()
    cosmos.reached[("replace_item", key)] = asyncio.Event()
    slow = asyncio.ensure_future(store.create(conversation(clock, "slow"), max_conversations=1))
    await cosmos.reached[("replace_item", key)].wait()  # admitted; its last write is on the way

    clock.now += PENDING_GRACE_SECONDS + 1
    other = CosmosStore(cosmos, clock=clock)
    await other.create(conversation(clock, "quick"), max_conversations=1)
    cosmos.hold[("replace_item", key)].set()

    with pytest.raises(VersionConflict):
        await slow
    assert cosmos.live() == {"quick"}
    assert cosmos.most_live == 1


async def test_an_entry_is_admitted_only_once_its_placeholder_holds_the_key(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    # Were the entry written first, another creation could find the key empty, drop the entry
    # and take the slot, and the held creation would then go on to a second live conversation.
    key = "mcp:oid-1:held"
    gate = cosmos.hold[("create_item", key)] = asyncio.Event()
    reached = cosmos.reached[("create_item", key)] = asyncio.Event()
    held = asyncio.ensure_future(store.create(conversation(clock, "held"), max_conversations=1))
    await reached.wait()

    await CosmosStore(cosmos, clock=clock).create(conversation(clock, "other"), max_conversations=1)
    gate.set()

    with pytest.raises(QuotaFull):
        await held
    assert cosmos.live() == {"other"}
    assert key not in cosmos.items


async def test_a_creation_under_way_keeps_its_slot_and_its_key(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    key = "mcp:oid-1:busy"
    cosmos.hold[("replace_item", key)] = asyncio.Event()
    cosmos.reached[("replace_item", key)] = asyncio.Event()
    busy = asyncio.ensure_future(store.create(conversation(clock, "busy"), max_conversations=1))
    await cosmos.reached[("replace_item", key)].wait()

    other = CosmosStore(cosmos, clock=clock)
    with pytest.raises(QuotaFull):
        await other.create(conversation(clock, "other"), max_conversations=1)
    # A creation of the same key waits for the one under way, and conflicts once it is live.
    same = asyncio.ensure_future(other.create(conversation(clock, "busy"), max_conversations=1))
    await asyncio.sleep(0.05)
    assert not same.done()
    cosmos.hold[("replace_item", key)].set()

    assert isinstance(await busy, str)
    with pytest.raises(VersionConflict):
        await same
    assert cosmos.live() == {"busy"}


async def test_a_placeholder_left_by_a_creation_that_died_holds_its_key_only_for_the_grace(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    key = "mcp:oid-1:orphan"
    cosmos.hold[("replace_item", key)] = asyncio.Event()
    cosmos.reached[("replace_item", key)] = asyncio.Event()
    dying = asyncio.ensure_future(store.create(conversation(clock, "orphan"), max_conversations=2))
    await cosmos.reached[("replace_item", key)].wait()
    dying.cancel()  # as if its process were killed between the placeholder and the conversation
    await asyncio.gather(dying, return_exceptions=True)
    cosmos.hold[("replace_item", key)].set()

    other = CosmosStore(cosmos, clock=clock)
    waiting = asyncio.ensure_future(other.create(conversation(clock, "orphan"), max_conversations=2))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.now += PENDING_GRACE_SECONDS + 1  # the placeholder is given up on
    assert isinstance(await waiting, str)
    assert cosmos.live() == {"orphan"}


# --- what each path costs -----------------------------------------------------------------------


async def test_requests_per_creation_with_and_without_the_quota(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await store.create(conversation(clock, "free"))
    assert cosmos.methods() == ["create_item"]

    cosmos.calls.clear()
    await store.create(conversation(clock, "first"), max_conversations=3)
    # The user's first: the quota item is missing, so one query takes in what is there already.
    assert cosmos.methods() == ["read_item", "query_items", "create_item", "create_item", "replace_item"]

    cosmos.calls.clear()
    await store.create(conversation(clock, "second"), max_conversations=3)
    # Read the quota item, write the placeholder, admit, turn the placeholder into the conversation.
    assert cosmos.calls == [
        ("read_item", QUOTA_ID),
        ("create_item", "mcp:oid-1:second"),
        ("replace_item", QUOTA_ID),
        ("replace_item", "mcp:oid-1:second"),
    ]

    cosmos.calls.clear()
    with pytest.raises(QuotaFull) as full:
        await store.create(conversation(clock, "third"), max_conversations=3)
    assert full.value.kept == 3  # "free" was taken in by the first creation under the quota
    assert cosmos.methods() == ["read_item", "query_items"], "a refusal writes nothing"

    assert await store.delete(OID, "free") is True
    cosmos.calls.clear()
    await store.create(conversation(clock, "third"), max_conversations=3)
    # At the limit: the query, and a delete on the key it no longer shows, proving it empty.
    assert cosmos.calls[:3] == [
        ("read_item", QUOTA_ID),
        ("query_items", cosmos.calls[1][1]),
        ("delete_item", "mcp:oid-1:free"),
    ]
    assert cosmos.methods()[3:] == ["create_item", "replace_item", "replace_item"]


async def test_a_refused_creation_writes_nothing_and_a_lost_race_removes_its_placeholder(
    cosmos: FakeCosmos, clock: Clock
) -> None:
    first, second = CosmosStore(cosmos, clock=clock), CosmosStore(cosmos, clock=clock)
    await create_all(first, clock, ["a"], limit=2)
    # `second` reads the quota item with one slot left, writes its placeholder, and is held
    # before admitting itself; `first` takes the last slot meanwhile.
    gate = cosmos.hold[("replace_item", QUOTA_ID)] = asyncio.Event()
    reached = cosmos.reached[("replace_item", QUOTA_ID)] = asyncio.Event()
    late = asyncio.ensure_future(second.create(conversation(clock, "late"), max_conversations=2))
    await reached.wait()
    del cosmos.hold[("replace_item", QUOTA_ID)]
    await first.create(conversation(clock, "b"), max_conversations=2)
    cosmos.calls.clear()
    gate.set()

    # Its write of the quota item fails (412); it reads again, finds no room, and goes.
    with pytest.raises(QuotaFull):
        await late
    # (Its held write was counted before the hold.) The delete removes its placeholder.
    assert cosmos.methods() == ["read_item", "query_items", "delete_item"]
    assert "mcp:oid-1:late" not in cosmos.items
    assert cosmos.live() == {"a", "b"}


# --- the quota item ---------------------------------------------------------------------------


async def test_the_quota_item_is_out_of_every_conversation_query(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await create_all(store, clock, ["a", "b"], limit=5)
    quota = cosmos.items[QUOTA_ID]
    assert quota["kind"] == "quota" and quota["tenant"] == TID and quota["ttl"] == -1
    assert "tid" not in quota and "expiresAt" not in quota
    assert sorted(quota["admitted"]) == ["a", "b"]
    assert await store.count(OID, TID) == 2
    assert [s.conversation_id for s in (await store.list(OID, TID, limit=10)).items] == ["a", "b"]
    assert await store.delete_all(OID, TID) == 2
    assert cosmos.items == {}, "the quota item goes with the last conversation"


async def test_a_tenant_id_unfit_for_an_item_id_is_named_by_its_digest(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await store.create(conversation(clock, "a", tid="odd/tenant?#"), max_conversations=5)
    (quota_id,) = [i for i in cosmos.items if i.startswith("quota:")]
    assert quota_id.startswith("quota:oid-1:sha256-") and not any(ch in quota_id for ch in "/\\?#")


async def test_a_placeholder_reads_as_missing_everywhere(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    key = "mcp:oid-1:coming"
    cosmos.hold[("replace_item", key)] = asyncio.Event()
    cosmos.reached[("replace_item", key)] = asyncio.Event()
    coming = asyncio.ensure_future(store.create(conversation(clock, "coming"), max_conversations=5))
    await cosmos.reached[("replace_item", key)].wait()

    assert cosmos.items[key]["pending"] is True
    assert await store.get(OID, "coming") is None
    assert await store.count(OID, TID) == 0
    cosmos.hold[("replace_item", key)].set()
    etag = await coming
    stored = await store.get(OID, "coming")
    assert stored is not None and stored.etag == etag


async def test_conversations_made_before_the_quota_count_against_it(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    for cid in ("old-1", "old-2"):
        await store.create(conversation(clock, cid))
    await store.create(conversation(clock, "new"), max_conversations=3)
    with pytest.raises(QuotaFull) as full:
        await store.create(conversation(clock, "over"), max_conversations=3)
    assert full.value.kept == 3


async def test_an_expired_conversation_not_yet_purged_gives_its_slot_back(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await store.create(conversation(clock, "short", ttl=10), max_conversations=1)
    clock.now += 11  # expired; Cosmos DB has not purged it yet
    await store.create(conversation(clock, "next"), max_conversations=1)
    assert "mcp:oid-1:short" not in cosmos.items  # removed, as Cosmos DB's purge would
    assert cosmos.live() == {"next"}


async def test_a_conversation_that_vanished_gives_its_slot_back(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await create_all(store, clock, ["a", "b"], limit=2)
    cosmos.vanish("mcp:oid-1:a")
    await store.create(conversation(clock, "c"), max_conversations=2)
    assert sorted(cosmos.items[QUOTA_ID]["admitted"]) == ["b", "c"]


async def test_a_conversation_created_again_after_a_delete_goes_through_the_quota(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await create_all(store, clock, ["a"], limit=1)
    assert await store.delete(OID, "a") is True
    await store.create(conversation(clock, "a"), max_conversations=1)
    with pytest.raises(QuotaFull):
        await store.create(conversation(clock, "b"), max_conversations=1)
    assert cosmos.live() == {"a"}


async def test_the_quota_item_stays_small_however_many_come_and_go(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    for n in range(200):
        await store.create(conversation(clock, f"c{n}"), max_conversations=1000)
        assert await store.delete(OID, f"c{n}") is True
        assert len(cosmos.items[QUOTA_ID]["admitted"]) <= QUOTA_SLACK + 1


async def test_lost_answers_to_the_placeholder_and_the_admission_still_create_once(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await create_all(store, clock, ["a"], limit=3)
    cosmos.lose |= {"create_item", "replace_item"}  # applied, answered 409 and 412
    etag = await store.create(conversation(clock, "b"), max_conversations=3)
    stored = await store.get(OID, "b")
    assert stored is not None and stored.etag == etag
    assert sorted(cosmos.items[QUOTA_ID]["admitted"]) == ["a", "b"]


# --- delete_all --------------------------------------------------------------------------------


async def test_delete_all_removes_the_quota_item_once_nothing_is_left(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await create_all(store, clock, ["a", "b"], limit=5)
    assert await store.delete(OID, "a") is True  # its entry stays until something reconciles
    assert await store.delete_all(OID, TID) == 1
    assert cosmos.items == {}
    await store.create(conversation(clock, "c"), max_conversations=5)
    assert sorted(cosmos.items[QUOTA_ID]["admitted"]) == ["c"]


async def test_delete_all_keeps_an_entry_admitted_after_it_read_the_quota_item(
    store: CosmosStore, cosmos: FakeCosmos, clock: Clock
) -> None:
    await create_all(store, clock, ["a"], limit=5)
    hold = cosmos.hold[("delete_item", "mcp:oid-1:a")] = asyncio.Event()
    reached = cosmos.reached[("delete_item", "mcp:oid-1:a")] = asyncio.Event()
    erase = asyncio.ensure_future(store.delete_all(OID, TID))
    await reached.wait()
    # Between delete_all's read of the quota item and its write: a new conversation is admitted.
    await CosmosStore(cosmos, clock=clock).create(conversation(clock, "new"), max_conversations=5)
    hold.set()

    assert await erase == 1
    assert "new" in cosmos.items[QUOTA_ID]["admitted"]
    assert cosmos.live() == {"new"}
