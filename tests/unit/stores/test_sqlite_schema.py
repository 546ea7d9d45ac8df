"""Opening the SQLite store's file: the layouts it reads (0.3 and 0.4 upgraded in place), the
ones it refuses, and why it cannot open said as what it is: only a damaged file is sent to a backup."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pydantic_core
import pytest
from support.stores import TTL, Clock, StoredAs, conversation, damage, fill, raw, stored_keys

from app.domain.conversation import Conversation, Turn
from app.stores import sqlite
from app.stores.codec import to_document
from app.stores.sqlite import SqliteStore
from app.stores.sqlite_schema import BUSY_TIMEOUT, START_WAITS, StartupError

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "nested" / "dir" / "conversations.db"


# --- layouts --------------------------------------------------------------------------------


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


# --- refusals -------------------------------------------------------------------------------


async def test_a_damaged_file_is_refused_at_start_up_in_one_line(path: Path, clock: Clock) -> None:
    store = await SqliteStore.open(path, clock)
    for item in fill(clock):
        await store.create(item)
    await store.aclose()
    damage(path)
    with pytest.raises(StartupError) as refused:
        await SqliteStore.open(path, clock)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{path} is not a usable SQLite database (")
    assert message.endswith("restore it from a backup, or move it away to start with no conversations")


async def test_a_data_folder_that_is_a_file_is_refused_in_one_line(tmp_path: Path, clock: Clock) -> None:
    (tmp_path / "data").write_text("not a folder")
    with pytest.raises(StartupError, match="set ANVIL_DATA_DIR to a folder Anvil can write to"):
        await SqliteStore.open(tmp_path / "data" / "conversations.sqlite3", clock)


@pytest.fixture
def busy_timeout(monkeypatch: pytest.MonkeyPatch) -> float:
    """The store's wait for a lock, made short (the messages must name the wait really made)."""
    short = BUSY_TIMEOUT / 20
    monkeypatch.setattr(sqlite, "BUSY_TIMEOUT", short)
    return short


async def existing_database(tmp_path: Path) -> Path:
    """A store's database, made and closed, for another connection to lock."""
    path = tmp_path / "conversations.sqlite3"
    await (await SqliteStore.open(path)).aclose()
    return path


async def test_a_database_another_process_keeps_locked_is_named_as_locked_not_damaged(
    tmp_path: Path, busy_timeout: float
) -> None:
    path = await existing_database(tmp_path)
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")  # the write lock, held past the store's busy timeout
        with pytest.raises(StartupError) as refused:
            await SqliteStore.open(path)
        other.execute("ROLLBACK")
    assert str(refused.value) == (
        f"{path} stayed locked by another process for {START_WAITS * busy_timeout:g} s (database is "
        "locked): stop the process that holds it, or start again once it is done"
    )
    await (await SqliteStore.open(path)).aclose()  # and once it is released, it opens


async def test_a_start_waits_out_a_lock_held_longer_than_one_busy_timeout(
    tmp_path: Path, busy_timeout: float
) -> None:
    # As another process starting on the same file may hold it: past one busy timeout, within
    # the start's whole wait.
    path = await existing_database(tmp_path)
    with closing(sqlite3.connect(path, isolation_level=None, check_same_thread=False)) as other:
        other.execute("BEGIN EXCLUSIVE")
        release = threading.Timer(2.5 * busy_timeout, lambda: other.execute("ROLLBACK"))
        release.start()
        try:
            started = time.monotonic()
            store = await SqliteStore.open(path)
            waited = time.monotonic() - started
        finally:
            release.join()
    await store.aclose()
    assert waited >= 2 * busy_timeout  # it did wait past one busy timeout for the lock


async def test_a_folder_where_the_database_should_be_is_not_called_damaged(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    path.mkdir()
    with pytest.raises(StartupError) as refused:
        await SqliteStore.open(path)
    assert str(refused.value).startswith(f"SQLite cannot read and write {path} (")
    assert "backup" not in str(refused.value)
