"""SQLite store behaviour beyond the shared contract: files, processes, purging, listing, threads."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pydantic_core
import pytest

from app.domain.conversation import Conversation, Turn
from app.domain.ports import Stored, VersionConflict
from app.errors import Unavailable
from app.stores import decoded as decoded_module
from app.stores import sqlite as sqlite_module
from app.stores.codec import to_document
from app.stores.decoded import Decoded
from app.stores.sqlite import SqliteStore

pytestmark = pytest.mark.anyio

TTL = 3600.0


class StoredAs:
    """Equal to any `Stored` holding `conversation` with an ETag, whatever the ETag (they are random)."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stored) and other.conversation == self.conversation and bool(other.etag)

    def __repr__(self) -> str:
        return f"StoredAs({self.conversation!r})"


class Clock:
    """A clock the tests move by hand."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def conversation(
    clock: Clock, conversation_id: str = "conv-1", version: int = 1, **changes: object
) -> Conversation:
    made = Conversation(
        oid="oid-1",
        tid="tenant-1",
        conversation_id=conversation_id,
        created_at=clock.now,
        updated_at=clock.now,
        expires_at=clock.now + TTL,
        version=version,
        turns=tuple(Turn(n, f"q{n}", f"a{n}", clock.now) for n in range(1, version + 1)),
    )
    return dataclasses.replace(made, **changes)  # type: ignore[arg-type]


def raw(path: Path) -> closing[sqlite3.Connection]:
    """An independent connection to the file: another process's view of it."""
    return closing(sqlite3.connect(path, isolation_level=None))


def stored_keys(path: Path) -> list[str]:
    """Keys physically in the file, expired or not."""
    with raw(path) as db:
        return [row[0] for row in db.execute("SELECT key FROM conversations ORDER BY key")]


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
_EARLIER_TABLE = """
CREATE TABLE conversations (
    key TEXT PRIMARY KEY, oid TEXT NOT NULL, conversation_id TEXT NOT NULL,
    version INTEGER NOT NULL, updated_at REAL NOT NULL, expires_at REAL NOT NULL,
    document TEXT NOT NULL, expiry_bucket INTEGER NOT NULL, updated_bucket INTEGER NOT NULL
)
"""


async def test_a_file_in_an_earlier_layout_is_refused_and_left_as_it_was(path: Path, clock: Clock) -> None:
    path.parent.mkdir(parents=True)
    with raw(path) as db:
        db.execute(_EARLIER_TABLE)
        db.execute("INSERT INTO conversations VALUES ('mcp:oid-1:old', 'oid-1', 'old', 1, 0, 0, '{}', 0, 0)")
    with pytest.raises(RuntimeError, match="move the file away") as refused:
        await SqliteStore.open(path, clock)
    assert str(path) in str(refused.value)
    with raw(path) as db:
        assert [r[1] for r in db.execute("PRAGMA table_info(conversations)")][-2:] == [
            "expiry_bucket",
            "updated_bucket",
        ]
        indexes = db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
        assert indexes.fetchall() == []
    assert stored_keys(path) == ["mcp:oid-1:old"]


# The table and indexes Anvil 0.3.0 creates, and how it encodes a document.
_TABLE_0_3_0 = """
CREATE TABLE conversations (
    key TEXT PRIMARY KEY, oid TEXT NOT NULL, tid TEXT NOT NULL, conversation_id TEXT NOT NULL,
    version INTEGER NOT NULL, updated_at REAL NOT NULL, expires_at REAL NOT NULL, title TEXT,
    turn_count INTEGER NOT NULL, document TEXT NOT NULL
)
"""
_INDEXES_0_3_0 = (
    "CREATE INDEX conversations_by_owner ON conversations (oid, updated_at)",
    "CREATE INDEX conversations_by_expiry ON conversations (expires_at)",
)


def write_as_0_3_0(path: Path, conversations: list[Conversation]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with raw(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(_TABLE_0_3_0)
        for index in _INDEXES_0_3_0:
            db.execute(index)
        for c in conversations:
            document = pydantic_core.to_json(to_document(c)).decode()
            row = (c.key, c.oid, c.tid, c.conversation_id, c.version, c.updated_at, c.expires_at)
            db.execute(
                "INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*row, c.title, c.turn_count, document),
            )


async def test_a_file_written_by_0_3_0_is_read_whole_and_continued(path: Path, clock: Clock) -> None:
    usage = Turn(3, "q3 ✓", "a3 🔨", clock.now, "req-3", "digest-3", 120, 45)
    written = [
        conversation(clock, "plain", version=2),
        conversation(clock, "named", version=3, title="Tëst", instructions="Be brief.", dropped=4),
        conversation(clock, "usage", version=3, turns=(*conversation(clock, version=2).turns, usage)),
    ]
    write_as_0_3_0(path, written)
    store = await SqliteStore.open(path, clock)
    try:
        for c in written:
            assert await store.get(c.oid, c.conversation_id) == StoredAs(c)
        etags = {(await store.get(c.oid, c.conversation_id)).etag for c in written}  # type: ignore[union-attr]
        assert len(etags) == len(written)  # each row was given a token of its own
        clock.now += 1
        named = written[1]
        following = named.with_turn(
            Turn(4, "next", "answer", clock.now),
            now=clock.now,
            ttl_seconds=TTL,
            max_turns=50,
            max_bytes=10**6,
        )
        read = await store.get(named.oid, named.conversation_id)
        assert read is not None
        assert await store.replace(following, if_match=read.etag) != read.etag
        with raw(path) as db:
            (document,) = db.execute(
                "SELECT document FROM conversations WHERE key = ?", (named.key,)
            ).fetchone()
        # The same text 0.3.0 would have written for it.
        assert document == pydantic_core.to_json(to_document(following)).decode()
        listed = await store.list("oid-1", "tenant-1", limit=10)
        assert {s.conversation_id for s in listed.items} == {"plain", "named", "usage"}
    finally:
        await store.aclose()


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
    with pytest.raises(Unavailable, match="retry shortly"):
        await store.get("oid-1", "conv-1")
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
    db = sqlite_module._connect(path)
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


# --- conversations kept decoded ---------------------------------------------------------------


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    decodes: list[int] = []
    original = sqlite_module.from_document

    def counting(document: dict[str, object]) -> Conversation:
        decodes.append(1)
        return original(document)

    monkeypatch.setattr(sqlite_module, "from_document", counting)
    return decodes


async def test_another_processes_write_is_read_from_the_file(
    store: SqliteStore, path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = await SqliteStore.open(path, clock)
    try:
        etag = await store.create(conversation(clock))
        assert await other.get("oid-1", "conv-1") is not None
        clock.now += 1
        theirs = conversation(clock, version=2, title="theirs", created_at=clock.now - 1)
        await other.replace(theirs, if_match=etag)
        decodes = count_decodes(monkeypatch)
        assert await store.get("oid-1", "conv-1") == StoredAs(theirs)
        assert decodes == [1]
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


def fill(clock: Clock, count: int = 40) -> list[Conversation]:
    """Conversations big enough to spread over many pages of the file."""
    return [
        conversation(clock, f"conv-{n:03d}", turns=(Turn(1, "q" * 3000, "a" * 3000, clock.now),))
        for n in range(count)
    ]


def damage(path: Path) -> None:
    """Overwrite every page but the first (the schema) with garbage, as a failing disk might."""
    with raw(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
    with path.open("r+b") as file:
        size = file.seek(0, 2)
        file.seek(page_size)
        file.write(b"\xa5" * (size - page_size))


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


async def test_a_damaged_file_is_refused_at_start_up_in_one_line(path: Path, clock: Clock) -> None:
    store = await SqliteStore.open(path, clock)
    for item in fill(clock):
        await store.create(item)
    await store.aclose()
    damage(path)
    with pytest.raises(sqlite_module.StartupError) as refused:
        await SqliteStore.open(path, clock)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{path} is not a usable SQLite database (")
    assert message.endswith("restore it from a backup, or move it away to start with no conversations")


async def test_a_data_folder_that_is_a_file_is_refused_in_one_line(tmp_path: Path, clock: Clock) -> None:
    (tmp_path / "data").write_text("not a folder")
    with pytest.raises(sqlite_module.StartupError, match="set ANVIL_DATA_DIR to a folder Anvil can write to"):
        await SqliteStore.open(tmp_path / "data" / "conversations.sqlite3", clock)


# --- calls waiting together -------------------------------------------------------------------


def statements(store: SqliteStore) -> list[str]:
    """Every statement the store's connection runs from now on, first word upper-cased."""
    seen: list[str] = []
    store._connection.set_trace_callback(lambda sql: seen.append(sql.split()[0].upper()))
    return seen


async def test_writes_made_together_are_committed_in_one_transaction(
    store: SqliteStore, clock: Clock
) -> None:
    firsts = [conversation(clock, f"c-{n}") for n in range(4)]
    etags = await asyncio.gather(*(store.create(c) for c in firsts))
    seen = statements(store)
    seconds = [conversation(clock, f"c-{n}", version=2) for n in range(4)]
    assert (
        await asyncio.gather(
            *(store.replace(c, if_match=etag) for c, etag in zip(seconds, etags, strict=True))
        )
        != etags
    )
    assert seen == ["BEGIN", "UPDATE", "UPDATE", "UPDATE", "UPDATE", "COMMIT"]
    for c in seconds:
        assert await store.get(c.oid, c.conversation_id) == StoredAs(c)


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


async def test_a_batch_whose_transaction_fails_keeps_none_of_its_writes_and_still_answers_its_reads(
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


async def test_a_call_waiting_when_the_worker_stops_is_refused_not_left_waiting(
    path: Path, clock: Clock
) -> None:
    closing_store = await SqliteStore.open(path, clock)
    waiting = asyncio.ensure_future(closing_store.get("oid-1", "conv-1"))
    await asyncio.sleep(0)  # waiting for the worker thread, which has not been asked yet
    closing_store._worker.stop()
    with pytest.raises(RuntimeError, match="closed"):
        await waiting
    closing_store._connection.close()


# --- conversations kept decoded, by ETag ----------------------------------------------------


async def test_a_row_unchanged_since_this_process_wrote_it_is_not_decoded_again(
    store: SqliteStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    decodes = count_decodes(monkeypatch)
    written = conversation(clock, version=3)
    etag = await store.create(written)
    assert await store.get("oid-1", "conv-1") == Stored(written, etag)
    assert decodes == []


async def test_the_decoded_conversations_are_bounded(
    store: SqliteStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "_decoded", Decoded(capacity=3))
    for n in range(5):
        await store.create(conversation(clock, f"c-{n}"))
    decodes = count_decodes(monkeypatch)
    for n in reversed(range(5)):
        assert await store.get("oid-1", f"c-{n}") is not None
    assert len(decodes) == 2  # the two written first were forgotten


async def test_a_read_waiting_beside_a_write_sees_it_without_decoding_the_document(
    store: SqliteStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = conversation(clock)
    etag = await store.create(first)
    decodes = count_decodes(monkeypatch)
    second = conversation(clock, version=2)
    written, read = await asyncio.gather(store.replace(second, if_match=etag), store.get("oid-1", "conv-1"))
    assert read == Stored(second, written)
    assert decodes == []


# --- turns kept encoded -------------------------------------------------------------------------


def count_encoded_turns(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    encoded: list[int] = []
    original = decoded_module.encode_turn

    def counting(turn: Turn) -> str:
        encoded.append(turn.number)
        return original(turn)

    monkeypatch.setattr(decoded_module, "encode_turn", counting)
    return encoded


def stored_document(path: Path) -> object:
    with raw(path) as db:
        return json.loads(db.execute("SELECT document FROM conversations").fetchone()[0])


async def test_a_turn_appended_to_what_this_process_wrote_is_the_only_turn_encoded(
    store: SqliteStore, path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = count_encoded_turns(monkeypatch)
    current = conversation(clock, version=3)
    etag = await store.create(current)
    assert encoded == [1, 2, 3]
    for number in (4, 5, 6):
        encoded.clear()
        clock.now += 1
        turn = Turn(number, f"q{number} ✓", f"a{number}", clock.now, "rid", "digest", 10, 20)
        following = current.with_turn(turn, now=clock.now, ttl_seconds=TTL, max_turns=4, max_bytes=10_000)
        etag = await store.replace(following, if_match=etag)
        assert encoded == [number]
        assert stored_document(path) == to_document(following)
        current = following
    assert [t.number for t in current.turns] == [3, 4, 5, 6]  # the oldest ones were dropped


async def test_turns_are_encoded_whole_when_they_are_not_the_ones_held(
    store: SqliteStore, path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    etag = await store.create(conversation(clock, version=2))
    encoded = count_encoded_turns(monkeypatch)
    # The same turn numbers with other text: a replace may store anything.
    rewritten = conversation(
        clock, version=3, turns=(Turn(1, "other", "text", 1.0), Turn(2, "q2", "a2", clock.now))
    )
    await store.replace(rewritten, if_match=etag)
    assert encoded == [1, 2]
    assert stored_document(path) == to_document(rewritten)


async def test_after_another_process_writes_the_next_write_encodes_every_turn(
    store: SqliteStore, path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = await SqliteStore.open(path, clock)
    try:
        etag = await store.create(conversation(clock))
        theirs = conversation(clock, version=2)
        await other.replace(theirs, if_match=etag)
        stored = await store.get("oid-1", "conv-1")
        assert stored == StoredAs(theirs)
        encoded = count_encoded_turns(monkeypatch)
        ours = conversation(clock, version=3)
        await store.replace(ours, if_match=stored.etag)
        assert encoded == [1, 2, 3]
        assert stored_document(path) == to_document(ours)
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
