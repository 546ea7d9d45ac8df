"""SQLite store behaviour beyond the shared contract: files, processes, purging, threads."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from app.adapters.stores import sqlite as sqlite_module
from app.adapters.stores.codec import to_document, turn_json
from app.domain.conversation import Conversation, Turn
from app.adapters.stores.sqlite import SqliteStore
from app.ports import VersionConflict
from app.errors import Unavailable

pytestmark = pytest.mark.anyio

TTL = 3600.0


class Clock:
    """A clock the tests move by hand."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def conversation(clock: Clock, conversation_id: str = "conv-1", version: int = 1) -> Conversation:
    return Conversation(
        oid="oid-1",
        tid="tenant-1",
        conversation_id=conversation_id,
        created_at=clock.now,
        updated_at=clock.now,
        expires_at=clock.now + TTL,
        version=version,
        turns=tuple(Turn(n, f"q{n}", f"a{n}", clock.now) for n in range(1, version + 1)),
    )


def stored_keys(path: Path) -> list[str]:
    """Keys physically in the file, expired or not, read by an independent connection."""
    with closing(sqlite3.connect(path)) as raw:
        return [row[0] for row in raw.execute("SELECT key FROM conversations ORDER BY key")]


def journal_mode(path: Path) -> str:
    assert path.exists()
    with closing(sqlite3.connect(path)) as raw:
        return str(raw.execute("PRAGMA journal_mode").fetchone()[0])


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


async def test_open_creates_the_directory_and_a_wal_database(store: SqliteStore, path: Path) -> None:
    assert journal_mode(path) == "wal"


async def test_data_survives_close_and_reopen(path: Path, clock: Clock) -> None:
    first = await SqliteStore.open(path, clock)
    await first.create(conversation(clock))
    await first.aclose()
    again = await SqliteStore.open(path, clock)
    try:
        assert await again.get("oid-1", "conv-1") == conversation(clock)
    finally:
        await again.aclose()


async def test_two_stores_on_one_file_share_writes_and_conflicts(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    other = await SqliteStore.open(path, clock)
    try:
        await store.create(conversation(clock))
        assert await other.get("oid-1", "conv-1") == conversation(clock)
        with pytest.raises(VersionConflict):
            await other.create(conversation(clock))
        await other.replace(conversation(clock, version=2), expected_version=1)
        with pytest.raises(VersionConflict):
            await store.replace(conversation(clock, version=2), expected_version=1)
        assert await store.get("oid-1", "conv-1") == conversation(clock, version=2)
        assert await other.delete("oid-1", "conv-1") is True
        assert await store.get("oid-1", "conv-1") is None
    finally:
        await other.aclose()


async def test_expired_rows_are_purged_by_a_later_write(store: SqliteStore, path: Path, clock: Clock) -> None:
    await store.create(conversation(clock, "soon-gone"))
    clock.now += TTL + sqlite_module.PURGE_INTERVAL
    await store.create(conversation(clock, "fresh"))
    assert stored_keys(path) == ["mcp:oid-1:fresh"]


async def test_sqlite_work_runs_on_one_thread_that_is_not_the_loops(store: SqliteStore, clock: Clock) -> None:
    threads: set[int] = set()

    def record(statement: str) -> None:
        threads.add(threading.get_ident())

    # The trace callback runs on whichever thread executes a statement.
    await store._run(lambda db: db.set_trace_callback(record))
    await store.create(conversation(clock))
    await store.replace(conversation(clock, version=2), expected_version=1)
    await store.get("oid-1", "conv-1")
    await store.check()
    assert len(threads) == 1
    assert threading.get_ident() not in threads


async def test_loop_keeps_running_while_a_write_waits_for_another_process(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    other_process = sqlite3.connect(path, isolation_level=None)
    try:
        other_process.execute("BEGIN IMMEDIATE")  # holds the write lock
        write = asyncio.create_task(store.create(conversation(clock)))
        ticks = 0
        for _ in range(5):
            await asyncio.sleep(0.02)
            ticks += 1
        assert ticks == 5 and not write.done()
        other_process.execute("ROLLBACK")
        await write
    finally:
        other_process.close()
    assert await store.get("oid-1", "conv-1") == conversation(clock)


async def test_lock_held_past_the_busy_timeout_reports_unavailable(
    path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT", 0.05)
    impatient = await SqliteStore.open(path, clock)
    other_process = sqlite3.connect(path, isolation_level=None)
    try:
        other_process.execute("BEGIN IMMEDIATE")
        with pytest.raises(Unavailable):
            await impatient.create(conversation(clock))
    finally:
        other_process.close()
        await impatient.aclose()


async def test_aclose_twice_is_safe_and_later_calls_fail_clearly(path: Path, clock: Clock) -> None:
    closing = await SqliteStore.open(path, clock)
    await closing.aclose()
    await closing.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await closing.get("oid-1", "conv-1")


async def test_a_conversation_this_process_holds_is_not_decoded_again_until_it_changes(
    store: SqliteStore, path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[str] = []
    real = sqlite_module.from_document

    def counting(document: object) -> Conversation:
        result = real(document)  # type: ignore[arg-type]
        decoded.append(result.conversation_id)
        return result

    monkeypatch.setattr(sqlite_module, "from_document", counting)
    first = conversation(clock)
    await store.create(first)
    assert await store.get("oid-1", "conv-1") == first
    assert decoded == []  # written by this process: its decoded value is reused

    other = await SqliteStore.open(path, clock)  # another process on the same file
    try:
        clock.now += 1
        second = conversation(clock, version=2)
        await other.replace(second, expected_version=1)
    finally:
        await other.aclose()

    assert await store.get("oid-1", "conv-1") == second
    assert decoded == ["conv-1"]  # changed elsewhere: read and decoded once
    assert await store.get("oid-1", "conv-1") == second
    assert decoded == ["conv-1"]


async def test_a_call_whose_caller_gave_up_leaves_the_store_working(store: SqliteStore, clock: Clock) -> None:
    started, release = threading.Event(), threading.Event()

    def held(db: sqlite3.Connection) -> int:
        started.set()
        release.wait(10)
        return 1

    waiting = asyncio.create_task(store._run(held))
    await asyncio.to_thread(started.wait, 10)
    waiting.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await store.create(conversation(clock))
    assert await store.get("oid-1", "conv-1") == conversation(clock)


async def test_errors_raised_on_the_worker_reach_the_caller(store: SqliteStore) -> None:
    def broken(db: sqlite3.Connection) -> None:
        raise ValueError("raised on the worker")

    with pytest.raises(ValueError, match="raised on the worker"):
        await store._run(broken)
    await store.check()


async def test_closing_the_store_ends_its_worker_thread(path: Path, clock: Clock) -> None:
    store = await SqliteStore.open(path, clock)
    thread = store._worker._thread
    assert thread.is_alive()
    await store.aclose()
    thread.join(10)
    assert not thread.is_alive()


def stored_document(path: Path, key: str) -> object:
    with closing(sqlite3.connect(path)) as raw:
        return json.loads(
            raw.execute("SELECT document FROM conversations WHERE key = ?", (key,)).fetchone()[0]
        )


async def test_each_write_stores_the_whole_document_while_reusing_encoded_turns(
    store: SqliteStore, path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[int] = []

    def counting_turn_json(turn: Turn) -> bytes:
        encoded.append(turn.number)
        return turn_json(turn)

    monkeypatch.setattr(sqlite_module, "turn_json", counting_turn_json)
    current = conversation(clock)
    await store.create(current)
    for number in range(2, 12):
        base = await store.get("oid-1", "conv-1")
        assert base is not None
        clock.now += 1
        turn = Turn(number, f"question {number} ✓", f"answer {number}", clock.now)
        current = base.with_turn(turn, now=clock.now, ttl_seconds=TTL, max_turns=4, max_bytes=10_000)
        encoded.clear()
        await store.replace(current, expected_version=base.version)
        assert stored_document(path, current.key) == to_document(current)
        assert encoded == [number]  # only the new turn was encoded
    assert [t.number for t in current.turns] == [8, 9, 10, 11]
    # Another process reads it back whole.
    other = await SqliteStore.open(path, clock)
    try:
        assert await other.get("oid-1", "conv-1") == current
    finally:
        await other.aclose()


def buckets(path: Path) -> dict[str, tuple[tuple[int, int], tuple[int, int]]]:
    """Each row's stored (expiry, updated) buckets, and the buckets its times belong in."""
    width = sqlite_module.BUCKET_SECONDS
    with closing(sqlite3.connect(path)) as raw:
        rows = raw.execute(
            "SELECT key, expiry_bucket, updated_bucket, expires_at, updated_at FROM conversations"
        )
        return {
            key: ((expiry, updated), (int(expires_at // width), int(updated_at // width)))
            for key, expiry, updated, expires_at, updated_at in rows
        }


#: Long enough to outlive the clock moves of the bucket tests.
LONG_TTL = 10 * sqlite_module.BUCKET_SECONDS


async def test_turns_keep_both_buckets_right_as_the_times_move_across_buckets(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    current = replace(conversation(clock), expires_at=clock.now + LONG_TTL)
    await store.create(current)
    # Steps inside one bucket (the write that leaves the buckets alone) and across buckets.
    bucket = sqlite_module.BUCKET_SECONDS
    for step in (1.0, 60.0, bucket * 1.5, 5.0, bucket * 3):
        clock.now += step
        turn = Turn(current.next_turn_number, "q", "a", clock.now)
        following = current.with_turn(
            turn, now=clock.now, ttl_seconds=LONG_TTL, max_turns=10, max_bytes=10_000
        )
        await store.replace(following, expected_version=current.version)
        current = following
        stored, expected = buckets(path)[current.key]
        assert stored == expected
        # A stale version is refused whether or not the bucket moves.
        with pytest.raises(VersionConflict):
            await store.replace(following, expected_version=current.version - 1)
    assert await store.get("oid-1", "conv-1") == current


async def test_a_conversation_is_purged_once_its_moved_expiry_passes_not_before(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    first = replace(conversation(clock, "kept-alive"), expires_at=clock.now + LONG_TTL)
    await store.create(first)
    clock.now += 2 * sqlite_module.BUCKET_SECONDS
    turn = Turn(2, "q", "a", clock.now)
    moved = first.with_turn(turn, now=clock.now, ttl_seconds=LONG_TTL, max_turns=10, max_bytes=10_000)
    await store.replace(moved, expected_version=1)
    # Past the first expiry, before the moved one: a purging write keeps it.
    clock.now = first.expires_at + sqlite_module.PURGE_INTERVAL
    await store.create(conversation(clock, "purge-1"))
    assert "mcp:oid-1:kept-alive" in stored_keys(path)
    clock.now = moved.expires_at + sqlite_module.PURGE_INTERVAL
    await store.create(conversation(clock, "purge-2"))
    assert "mcp:oid-1:kept-alive" not in stored_keys(path)


async def test_the_purge_keeps_a_conversation_expiring_later_in_the_current_bucket(
    store: SqliteStore, path: Path, clock: Clock
) -> None:
    bucket = sqlite_module.BUCKET_SECONDS
    clock.now = (clock.now // bucket + 1) * bucket + 1  # just into a bucket
    late = replace(conversation(clock, "late"), expires_at=clock.now + sqlite_module.PURGE_INTERVAL * 2)
    early = replace(conversation(clock, "early"), expires_at=clock.now + 1)
    await store.create(late)
    await store.create(early)
    clock.now += sqlite_module.PURGE_INTERVAL  # both in now's bucket; only one has expired
    await store.create(conversation(clock, "purging"))
    assert stored_keys(path) == ["mcp:oid-1:late", "mcp:oid-1:purging"]


# The schema of files written before time buckets existed.
_OLD_SCHEMA = """
CREATE TABLE conversations (
    key TEXT PRIMARY KEY, oid TEXT NOT NULL, conversation_id TEXT NOT NULL,
    version INTEGER NOT NULL, updated_at REAL NOT NULL, expires_at REAL NOT NULL,
    document TEXT NOT NULL
);
CREATE INDEX conversations_by_owner ON conversations (oid, updated_at);
CREATE INDEX conversations_by_expiry ON conversations (expires_at);
"""


def write_old_file(path: Path, *conversations: Conversation) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as raw, raw:
        raw.executescript(_OLD_SCHEMA)
        for c in conversations:
            raw.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    c.key,
                    c.oid,
                    c.conversation_id,
                    c.version,
                    c.updated_at,
                    c.expires_at,
                    json.dumps(to_document(c)),
                ),
            )


def indexes(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as raw:
        return {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}


async def test_a_file_from_before_time_buckets_keeps_its_conversations_and_is_purged(
    path: Path, clock: Clock
) -> None:
    live = conversation(clock, "live", version=3)
    write_old_file(path, live)
    # Two processes open the file at once: one of them migrates it, both work.
    first, second = await asyncio.gather(SqliteStore.open(path, clock), SqliteStore.open(path, clock))
    try:
        assert indexes(path) >= {"conversations_by_owner_bucket", "conversations_by_expiry_bucket"}
        assert not indexes(path) & {"conversations_by_owner", "conversations_by_expiry"}
        assert all(stored == expected for stored, expected in buckets(path).values())
        assert await first.get("oid-1", "live") == live
        clock.now += 1
        turn = Turn(4, "q4", "a4", clock.now)
        following = live.with_turn(turn, now=clock.now, ttl_seconds=TTL, max_turns=10, max_bytes=10_000)
        await second.replace(following, expected_version=3)
        assert await first.get("oid-1", "live") == following
        # The migrated row expires and goes with the next purge like any other.
        clock.now = following.expires_at + sqlite_module.PURGE_INTERVAL
        await first.create(conversation(clock, "after"))
        assert stored_keys(path) == ["mcp:oid-1:after"]
    finally:
        await first.aclose()
        await second.aclose()
    # Opening it again changes nothing.
    again = await SqliteStore.open(path, clock)
    await again.aclose()
    assert not indexes(path) & {"conversations_by_owner", "conversations_by_expiry"}


async def test_listing_pages_newest_first_across_buckets_in_fresh_and_migrated_rows(
    path: Path, clock: Clock
) -> None:
    width = sqlite_module.BUCKET_SECONDS
    start = clock.now
    # Some in one bucket, some tied to the second, others hours apart; two written by an
    # earlier Anvil.
    offsets = {"a": 0.0, "b": 10.0, "c": 10.0, "d": width * 0.5, "e": width * 2, "f": width * 2 + 1}
    made = {
        name: replace(
            conversation(clock, name), updated_at=start + offset, expires_at=start + offset + LONG_TTL
        )
        for name, offset in offsets.items()
    }
    write_old_file(path, made["a"], made["e"])
    store = await SqliteStore.open(path, clock)
    try:
        for name in ("b", "c", "d", "f"):
            await store.create(made[name])
        seen: list[str] = []
        cursor = None
        while True:
            page = await store.list("oid-1", "tenant-1", limit=2, cursor=cursor)
            seen += [s.conversation_id for s in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == ["f", "e", "d", "b", "c", "a"]
    finally:
        await store.aclose()


def test_listing_walks_the_owner_index_instead_of_scanning_the_table(path: Path) -> None:
    db = sqlite_module._connect(path)
    try:
        plan = " | ".join(
            row[3]
            for row in db.execute(
                "EXPLAIN QUERY PLAN " + sqlite_module._LIST, ("oid", 1, "tid", 0.0, 1.0, 1.0, "", 10)
            )
        )
    finally:
        db.close()
    assert "USING INDEX conversations_by_owner_bucket" in plan, plan
    assert "SCAN conversations" not in plan, plan
