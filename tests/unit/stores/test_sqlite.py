"""SQLite store behaviour beyond the shared contract: the rows, processes sharing the file,
purging, listing, one call at a time on the connection, closing."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.stores import TTL, Clock, StoredAs, conversation, damage, fill, raw, stored_keys

from app.domain.conversation import Turn
from app.domain.ports import Stored, VersionConflict
from app.errors import StoreFailed, Unavailable
from app.stores import sqlite as sqlite_module
from app.stores.codec import to_document
from app.stores.sqlite import SqliteStore
from app.stores.sqlite_schema import connect

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "nested" / "dir" / "conversations.db"


@pytest.fixture
async def store(path: Path, clock: Clock) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(path, clock)
    yield opened
    await opened.aclose()


# --- the file -------------------------------------------------------------------------------


async def test_open_creates_the_directory_and_a_wal_database(store: SqliteStore, path: Path) -> None:
    with raw(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_data_survives_close_and_reopen(path: Path, clock: Clock) -> None:
    first = await SqliteStore.open(path, clock)
    etag = await first.create(conversation(clock))
    await first.aclose()
    again = await SqliteStore.open(path, clock)
    try:
        assert await again.get("oid-1", "conv-1") == Stored(conversation(clock), etag)
    finally:
        await again.aclose()


async def test_each_write_stores_the_whole_document_and_the_listed_columns(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    first = conversation(clock, title="First")
    etag = await store.create(first)
    clock.now += 5
    turn = Turn(2, "question ✓", "answer 🔨", clock.now)
    second = dataclasses.replace(
        first.with_turn(turn, now=clock.now, ttl_seconds=TTL, max_turns=10, max_bytes=10_000), title="Named"
    )
    await store.replace(second, if_match=etag)
    with raw(path) as db:
        row = db.execute(
            "SELECT oid, tid, conversation_id, version, updated_at, expires_at, title, turn_count, document "
            "FROM conversations"
        ).fetchone()
    *columns, document = row
    assert columns == ["oid-1", "tenant-1", "conv-1", 2, clock.now, clock.now + TTL, "Named", 2]
    assert json.loads(document) == to_document(second)


async def test_every_write_draws_an_etag_never_seen_before(store: SqliteStore, clock: Clock) -> None:
    created = await store.create(conversation(clock, version=3))
    replaced = await store.replace(conversation(clock, version=4), if_match=created)
    stored = await store.get("oid-1", "conv-1")
    assert stored is not None and stored.etag == replaced != created


async def test_an_etag_read_before_a_delete_never_matches_the_conversation_created_again(
    store: SqliteStore, clock: Clock
) -> None:
    # Versions start over at 1 after a delete: an ETag that named the version would match again.
    first = await store.create(conversation(clock, version=1))
    before_delete = await store.replace(conversation(clock, version=2, title="old"), if_match=first)
    assert await store.delete("oid-1", "conv-1") is True
    again = await store.create(conversation(clock, version=1))
    await store.replace(conversation(clock, version=2, title="new"), if_match=again)
    with pytest.raises(VersionConflict):
        await store.replace(conversation(clock, version=3, title="stale"), if_match=before_delete)
    stored = await store.get("oid-1", "conv-1")
    assert stored is not None and stored.conversation.title == "new"


@pytest.mark.parametrize("etag", ["4", "04", "four", "", "%"])
async def test_replace_with_an_etag_this_store_never_issued_conflicts(
    store: SqliteStore, clock: Clock, etag: str
) -> None:
    created = await store.create(conversation(clock, version=4))
    with pytest.raises(VersionConflict):
        await store.replace(conversation(clock, version=5), if_match=etag)
    with pytest.raises(VersionConflict):
        await store.replace(conversation(clock, version=5), if_match=created.upper() + " ")
    stored = await store.get("oid-1", "conv-1")
    assert stored is not None and stored.etag == created


# The table written by earlier Anvil versions (its rows have no tenant, title or turn count).
# --- several processes on one file ----------------------------------------------------------


async def test_two_stores_on_one_file_let_exactly_one_of_two_replaces_from_one_etag_win(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    other = await SqliteStore.open(path, clock)  # another process's connection
    try:
        etag = await store.create(conversation(clock))
        with pytest.raises(VersionConflict):
            await other.create(conversation(clock))
        ours = conversation(clock, version=2, title="ours")
        theirs = conversation(clock, version=2, title="theirs")
        results = await asyncio.gather(
            store.replace(ours, if_match=etag), other.replace(theirs, if_match=etag), return_exceptions=True
        )
        winners = [c for c, r in zip((ours, theirs), results, strict=True) if isinstance(r, str)]
        assert len(winners) == 1, results
        assert sum(isinstance(r, VersionConflict) for r in results) == 1, results
        assert await store.get("oid-1", "conv-1") == StoredAs(winners[0])
        assert await other.get("oid-1", "conv-1") == StoredAs(winners[0])
    finally:
        await other.aclose()


async def test_the_loop_keeps_running_while_a_write_waits_for_another_process(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    with raw(path) as other_process:
        other_process.execute("BEGIN IMMEDIATE")  # holds the write lock
        write = asyncio.create_task(store.create(conversation(clock)))
        for _ in range(5):
            await asyncio.sleep(0.02)  # would not return while the write blocked the loop
        assert not write.done()
        other_process.execute("ROLLBACK")
        await write
    stored = await store.get("oid-1", "conv-1")
    assert stored is not None and stored.conversation == conversation(clock)


async def test_a_lock_held_past_the_busy_timeout_reports_unavailable_until_released(
    path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT", 0.05)
    impatient = await SqliteStore.open(path, clock)
    try:
        with raw(path) as other_process:
            other_process.execute("BEGIN IMMEDIATE")
            with pytest.raises(Unavailable) as busy:
                await impatient.create(conversation(clock))
            assert busy.value.retry_after == 1.0
            other_process.execute("ROLLBACK")
        assert await impatient.create(conversation(clock))
    finally:
        await impatient.aclose()


async def test_a_database_that_can_no_longer_be_used_reports_unavailable(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    await store.create(conversation(clock))
    with raw(path) as other_process:
        other_process.execute("DROP TABLE conversations")
    with pytest.raises(StoreFailed, match="failed; retry later") as failed:
        await store.get("oid-1", "conv-1")
    assert failed.value.cause == "database-error" and str(path) in failed.value.remedy
    with pytest.raises(Unavailable):
        await store.list("oid-1", "tenant-1", limit=5)


# --- purging --------------------------------------------------------------------------------


async def test_a_write_purges_expired_rows_and_keeps_live_ones(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    await store.create(conversation(clock, "soon-gone", expires_at=clock.now + 10))
    await store.create(conversation(clock, "kept", expires_at=clock.now + 2 * sqlite_module.PURGE_INTERVAL))
    clock.now += sqlite_module.PURGE_INTERVAL
    etag = await store.create(conversation(clock, "fresh"))
    assert stored_keys(path) == ["mcp:oid-1:fresh", "mcp:oid-1:kept"]
    # A replace purges too, once the interval has passed again.
    clock.now += sqlite_module.PURGE_INTERVAL + 1
    await store.replace(conversation(clock, "fresh", version=2), if_match=etag)
    assert stored_keys(path) == ["mcp:oid-1:fresh"]


async def test_the_purge_runs_at_most_once_per_interval(store: SqliteStore, path: Path, clock: Clock) -> None:
    await store.create(conversation(clock, "first"))  # the first write purges (nothing yet)
    await store.create(conversation(clock, "short", expires_at=clock.now + 1))
    clock.now += 2
    await store.create(conversation(clock, "second"))
    assert "mcp:oid-1:short" in stored_keys(path)  # expired, but the interval has not passed
    assert await store.get("oid-1", "short") is None  # and reads as missing meanwhile
    clock.now += sqlite_module.PURGE_INTERVAL
    await store.create(conversation(clock, "third"))
    assert "mcp:oid-1:short" not in stored_keys(path)


# --- listing --------------------------------------------------------------------------------


async def test_listing_keeps_to_owner_tenant_and_live_rows_newest_first_with_ties_by_id(
    store: SqliteStore, clock: Clock
) -> None:
    start = clock.now
    # Two ties on one time, written out of id order; other owners, tenants and an expired one
    # around them.
    for cid, offset in (("b", 10.0), ("d", 0.0), ("c", 10.0), ("a", 10.0), ("e", 20.0), ("f", 5.0)):
        await store.create(conversation(clock, cid, updated_at=start + offset, title=f"title {cid}"))
    await store.create(conversation(clock, "other-tenant", tid="tenant-2", updated_at=start + 15))
    await store.create(conversation(clock, "expired", updated_at=start + 16, expires_at=start + 30))
    await store.create(dataclasses.replace(conversation(clock, "other-owner"), oid="oid-2"))
    clock.now = start + 30

    seen: list[str] = []
    cursor = None
    for _ in range(5):
        page = await store.list("oid-1", "tenant-1", limit=2, cursor=cursor)
        assert len(page.items) <= 2
        seen += [s.conversation_id for s in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert seen == ["e", "a", "b", "c", "f", "d"]
    (away,) = (await store.list("oid-1", "tenant-2", limit=5)).items
    assert away.conversation_id == "other-tenant"


async def test_listing_reads_the_columns_not_the_documents(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    await store.create(conversation(clock, version=3, title="Kept in a column"))
    with raw(path) as other_process:
        other_process.execute("UPDATE conversations SET document = '{}'")
    (summary,) = (await store.list("oid-1", "tenant-1", limit=5)).items
    assert (summary.title, summary.turns, summary.updated_at) == ("Kept in a column", 3, clock.now)


async def test_a_conversation_created_over_an_expired_one_takes_every_listed_column(
    store: SqliteStore, clock: Clock
) -> None:
    await store.create(conversation(clock, version=3, title="Old"))
    clock.now += TTL
    await store.create(conversation(clock, tid="tenant-2"))
    assert (await store.list("oid-1", "tenant-1", limit=5)).items == ()
    (summary,) = (await store.list("oid-1", "tenant-2", limit=5)).items
    assert (summary.title, summary.turns, summary.updated_at) == (None, 1, clock.now)


def query_plan(path: Path, statement: str, params: tuple[object, ...]) -> str:
    db = connect(path)
    try:
        return " | ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + statement, params))
    finally:
        db.close()


def test_listing_searches_the_owner_index_from_the_cursor(path: Path) -> None:
    plan = query_plan(path, sqlite_module._LIST, ("oid", 5.0, "tid", 0.0, 5.0, "c", 10))
    assert "SEARCH conversations USING INDEX conversations_by_owner (oid=? AND updated_at<?)" in plan, plan
    assert "SCAN" not in plan, plan


def test_the_purge_searches_the_expiry_index(path: Path) -> None:
    plan = query_plan(path, sqlite_module._PURGE, (0.0,))
    assert "USING INDEX conversations_by_expiry (expires_at<?)" in plan, plan


# --- threads and closing --------------------------------------------------------------------


async def test_calls_never_use_the_connection_at_the_same_time(store: SqliteStore) -> None:
    inside, overlaps = 0, 0
    guard = threading.Lock()

    def work(db: sqlite3.Connection) -> None:
        nonlocal inside, overlaps
        with guard:
            inside += 1
            overlaps += inside > 1
        time.sleep(0.01)
        with guard:
            inside -= 1

    await asyncio.gather(*(store._run(work) for _ in range(8)))
    assert overlaps == 0


async def test_a_cancelled_call_holds_the_connection_until_its_statement_is_done(
    store: SqliteStore, clock: Clock
) -> None:
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def held(db: sqlite3.Connection) -> None:
        started.set()
        release.wait(10)
        order.append("held")

    waiting = asyncio.create_task(store._run(held))
    await asyncio.to_thread(started.wait, 10)
    waiting.cancel()
    following = asyncio.create_task(store._run(lambda db: order.append("next")))
    await asyncio.sleep(0.05)
    assert order == []
    release.set()
    await asyncio.gather(waiting, following, return_exceptions=True)
    assert order == ["held", "next"]
    assert await store.create(conversation(clock))


async def test_aclose_waits_for_the_call_in_progress(path: Path) -> None:
    closing_store = await SqliteStore.open(path)
    started, release = threading.Event(), threading.Event()

    def slow(db: sqlite3.Connection) -> int:
        started.set()
        release.wait(10)
        return int(db.execute("SELECT 1").fetchone()[0])

    call = asyncio.create_task(closing_store._run(slow))
    await asyncio.to_thread(started.wait, 10)
    close = asyncio.create_task(closing_store.aclose())
    await asyncio.sleep(0.05)
    assert not close.done()
    release.set()
    assert await call == 1
    await close


async def test_a_closed_store_refuses_calls_and_closes_again_quietly(path: Path, clock: Clock) -> None:
    closed = await SqliteStore.open(path, clock)
    await closed.aclose()
    await closed.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await closed.get("oid-1", "conv-1")
    with pytest.raises(RuntimeError, match="closed"):
        await closed.create(conversation(clock))
    with pytest.raises(RuntimeError, match="closed"):
        await closed.check()


# --- what another process did ----------------------------------------------------------------


async def test_another_processes_write_is_read_from_the_file(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    other = await SqliteStore.open(path, clock)
    try:
        etag = await store.create(conversation(clock))
        assert await other.get("oid-1", "conv-1") is not None
        clock.now += 1
        theirs = conversation(clock, version=2, title="theirs", created_at=clock.now - 1)
        await other.replace(theirs, if_match=etag)
        assert await store.get("oid-1", "conv-1") == StoredAs(theirs)
        # Deleted elsewhere, then created again with the same version at another time.
        assert await other.delete("oid-1", "conv-1") is True
        clock.now += 1
        again = conversation(clock, version=2, title="again")
        await other.create(again)
        assert await store.get("oid-1", "conv-1") == StoredAs(again)
        assert await other.delete("oid-1", "conv-1") is True
        assert await store.get("oid-1", "conv-1") is None
    finally:
        await other.aclose()


async def test_a_conversation_deleted_and_created_again_elsewhere_at_the_same_instant_is_read_anew(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    # Same key, version and update time: only the ETag tells the new row from the one held.
    other = await SqliteStore.open(path, clock)
    try:
        await store.create(conversation(clock, title="old"))
        assert await store.get("oid-1", "conv-1") == StoredAs(conversation(clock, title="old"))
        assert await other.delete("oid-1", "conv-1") is True
        await other.create(conversation(clock, title="new"))
        assert await store.get("oid-1", "conv-1") == StoredAs(conversation(clock, title="new"))
    finally:
        await other.aclose()


async def test_a_damaged_file_is_an_outage_and_readiness_says_so(path: Path, clock: Clock) -> None:
    store = await SqliteStore.open(path, clock)
    try:
        for item in fill(clock):
            await store.create(item)
        damage(path)
        # Another writer touches the file, so the store's connection drops the pages it cached.
        with raw(path) as db:
            db.execute("CREATE TABLE touched (x)")
        with pytest.raises(Unavailable) as refused:
            await store.list("oid-1", "tenant-1", limit=50)
        assert refused.value.retry_after == 30.0
        with pytest.raises(Unavailable, match="damaged"):
            await store.check()
    finally:
        await store.aclose()


# --- one call, one statement -----------------------------------------------------------------


def statements(store: SqliteStore) -> list[str]:
    """Every statement the store's connection runs from now on, first word upper-cased."""
    seen: list[str] = []
    store._connection.set_trace_callback(lambda sql: seen.append(sql.split()[0].upper()))
    return seen


async def test_a_turn_costs_one_statement_to_read_and_one_to_write(store: SqliteStore, clock: Clock) -> None:
    etag = await store.create(conversation(clock))
    seen = statements(store)
    stored = await store.get("oid-1", "conv-1")
    assert stored is not None and stored.etag == etag
    await store.replace(conversation(clock, version=2), if_match=etag)
    assert seen == ["SELECT", "UPDATE"]


async def test_a_creation_under_a_quota_is_one_transaction(store: SqliteStore, clock: Clock) -> None:
    await store.create(conversation(clock))  # the first write also purges
    seen = statements(store)
    await store.create(conversation(clock, "second"), max_conversations=5)
    assert seen == ["BEGIN", "INSERT", "COMMIT"]


async def test_a_write_that_loses_its_race_leaves_the_others_of_its_batch_written(
    store: SqliteStore, clock: Clock
) -> None:
    a, b = conversation(clock, "a"), conversation(clock, "b")
    etag_a, etag_b = await asyncio.gather(store.create(a), store.create(b))
    results = await asyncio.gather(
        store.replace(conversation(clock, "a", version=2), if_match=etag_a),
        store.replace(conversation(clock, "b", version=2), if_match=etag_a),  # not b's ETag
        store.replace(conversation(clock, "b", version=2, title="twice"), if_match=etag_b),
        return_exceptions=True,
    )
    assert isinstance(results[0], str) and isinstance(results[1], VersionConflict)
    assert isinstance(results[2], str)
    assert await store.get("oid-1", "a") == StoredAs(conversation(clock, "a", version=2))
    assert await store.get("oid-1", "b") == StoredAs(conversation(clock, "b", version=2, title="twice"))


async def test_writes_refused_while_another_process_holds_the_lock_leave_the_rows_and_reads_answered(
    path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT", 0.05)
    impatient = await SqliteStore.open(path, clock)
    try:
        etag_a, etag_b = await asyncio.gather(
            impatient.create(conversation(clock, "a")), impatient.create(conversation(clock, "b"))
        )
        with raw(path) as other_process:
            other_process.execute("BEGIN IMMEDIATE")  # holds the write lock past the busy timeout
            results = await asyncio.gather(
                impatient.replace(conversation(clock, "a", version=2), if_match=etag_a),
                impatient.replace(conversation(clock, "b", version=2), if_match=etag_b),
                impatient.get("oid-1", "a"),
                return_exceptions=True,
            )
            other_process.execute("ROLLBACK")
        assert isinstance(results[0], Unavailable) and isinstance(results[1], Unavailable)
        assert results[2] == StoredAs(conversation(clock, "a"))
        for name in ("a", "b"):
            assert await impatient.get("oid-1", name) == StoredAs(conversation(clock, name))
    finally:
        await impatient.aclose()


async def test_a_caller_that_stops_waiting_does_not_stop_the_others(store: SqliteStore, clock: Clock) -> None:
    await store.create(conversation(clock))
    calls = [asyncio.ensure_future(store.get("oid-1", "conv-1")) for _ in range(3)]
    await asyncio.sleep(0)  # all three are waiting for the worker thread
    calls[1].cancel()
    assert await calls[0] == await calls[2] == StoredAs(conversation(clock))
    assert calls[1].cancelled()


async def test_a_call_made_just_before_closing_is_still_answered(path: Path, clock: Clock) -> None:
    closing_store = await SqliteStore.open(path, clock)
    await closing_store.create(conversation(clock))
    waiting = asyncio.ensure_future(closing_store.get("oid-1", "conv-1"))
    await asyncio.sleep(0)  # waiting for the worker thread, which has not been asked yet
    await closing_store.aclose()
    assert await waiting == StoredAs(conversation(clock))


# --- batches and what is held decoded ----------------------------------------------------------


async def test_writes_waiting_together_share_one_transaction_each_in_its_savepoint(
    store: SqliteStore, clock: Clock
) -> None:
    etags = await asyncio.gather(*(store.create(conversation(clock, name)) for name in "ab"))
    seen = statements(store)
    replaced = (conversation(clock, name, version=2) for name in "ab")
    await asyncio.gather(*(store.replace(c, if_match=e) for c, e in zip(replaced, etags, strict=True)))
    assert seen == ["BEGIN", *["SAVEPOINT", "UPDATE", "RELEASE"] * 2, "COMMIT"]


async def test_a_write_that_fails_in_its_batch_leaves_nothing_and_the_others_written(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    etag_a, etag_b = await asyncio.gather(
        store.create(conversation(clock, "a")), store.create(conversation(clock, "b"))
    )

    def half_done(db: sqlite3.Connection) -> int:
        db.execute("UPDATE conversations SET title = 'half' WHERE key = 'mcp:oid-1:a'")
        raise ValueError("failed after its statement")

    results = await asyncio.gather(
        store._run(half_done, write=True),
        store.replace(conversation(clock, "b", version=2), if_match=etag_b),
        return_exceptions=True,
    )
    assert isinstance(results[0], ValueError) and isinstance(results[1], str)
    assert await store.get("oid-1", "a") == Stored(conversation(clock, "a"), etag_a)
    assert await store.get("oid-1", "b") == StoredAs(conversation(clock, "b", version=2))
