"""A conversation store in one SQLite file, safe to share between processes on one host.

The stdlib `sqlite3` module blocks, so every call runs on one dedicated worker thread that
owns the connection; the event loop only awaits its results, handed back with one
`call_soon_threadsafe` each (cheaper than an executor's future chained to an asyncio one).
Writes are single statements guarded by the stored version and expiry, so they stay atomic
across processes as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import operator
import queue
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pydantic_core

from app.adapters.stores.codec import document_json, from_document, turn_json
from app.adapters.stores.cursor import decode_cursor, encode_cursor
from app.domain.conversation import Conversation, ConversationPage, ConversationSummary, conversation_key
from app.errors import Unavailable
from app.ports import VersionConflict

_T = TypeVar("_T")

#: Seconds a statement waits for another process's write lock before giving up.
BUSY_TIMEOUT = 5.0
#: Conversations kept decoded per process: a turn on a conversation whose stored version this
#: process already holds skips decoding the document (the read still asks the database).
DECODED_CACHE_SIZE = 1024
#: How often (seconds) a write also deletes every expired row, so the file does not grow forever.
PURGE_INTERVAL = 600.0

#: Width (seconds) of the time buckets the two indexes are built on. A turn moves a
#: conversation's `updated_at` and `expires_at`, but their buckets at most once per bucket
#: width, so a turn almost never rewrites an index entry (exact times would on every turn,
#: which was a third of a turn's cost in SQLite).
BUCKET_SECONDS = 3600

#: Before any cursor: above every bucket.
_NO_BUCKET_BOUND = 2**62

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    key TEXT PRIMARY KEY,
    oid TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    document TEXT NOT NULL,
    -- The buckets of expires_at and updated_at (anvil_bucket), placed last, as ALTER TABLE
    -- places them in files from before they existed.
    expiry_bucket INTEGER NOT NULL,
    updated_bucket INTEGER NOT NULL
);
-- A user's conversations, newest first: walked bucket by bucket, sorted within one.
CREATE INDEX IF NOT EXISTS conversations_by_owner_bucket ON conversations (oid, updated_bucket);
-- Lets the periodic purge find expired rows without scanning the table while holding the lock.
CREATE INDEX IF NOT EXISTS conversations_by_expiry_bucket ON conversations (expiry_bucket);
-- Files from before the buckets: their indexes on exact times go (the columns are added first).
DROP INDEX IF EXISTS conversations_by_owner;
DROP INDEX IF EXISTS conversations_by_expiry;
"""

#: Bucket columns that files from before them lack, and the time each is the bucket of.
_BUCKET_COLUMNS = {"expiry_bucket": "expires_at", "updated_bucket": "updated_at"}

# Inserts, or takes over the key only when the row there has expired: one statement, so two
# processes creating the same conversation cannot both succeed.
_CREATE = """
INSERT INTO conversations (
    key, oid, conversation_id, version, updated_at, expires_at, document, expiry_bucket, updated_bucket
)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    version = excluded.version,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at,
    document = excluded.document,
    expiry_bucket = excluded.expiry_bucket,
    updated_bucket = excluded.updated_bucket
WHERE conversations.expires_at <= ?
"""

_GET = """
SELECT CASE WHEN version = ? AND updated_at = ? THEN NULL ELSE document END
FROM conversations WHERE key = ? AND expires_at > ?
"""

# A turn: first as the common case, both times still in the buckets stored (no index entry
# changes); when that matches no row, `_REPLACE_MOVING` (a bucket moved, or the version is not
# the expected one, which it then reports too).
_REPLACE = """
UPDATE conversations SET version = ?, updated_at = ?, expires_at = ?, document = ?
WHERE key = ? AND version = ? AND expires_at > ? AND expiry_bucket = ? AND updated_bucket = ?
"""

_REPLACE_MOVING = """
UPDATE conversations
SET version = ?, updated_at = ?, expires_at = ?, document = ?, expiry_bucket = ?, updated_bucket = ?
WHERE key = ? AND version = ? AND expires_at > ?
"""


# Newest first, ties by conversation id; the cursor is the (updated_at, conversation_id) of the
# last row of the previous page. Ordering by bucket first is the same order (a bucket is a
# floor of the time) and lets the index deliver rows a bucket at a time.
_LIST = """
SELECT conversation_id, json_extract(document, '$.title'),
       -- turnCount is absent from documents written before it existed: derive it from the turns.
       COALESCE(json_extract(document, '$.turnCount'), json_extract(document, '$.turns[#-1].n'),
                json_extract(document, '$.dropped')),
       updated_at, expires_at
FROM conversations
WHERE oid = ? AND updated_bucket <= ? AND json_extract(document, '$.tid') = ? AND expires_at > ?
  AND (updated_at < ? OR (updated_at = ? AND conversation_id > ?))
ORDER BY updated_bucket DESC, updated_at DESC, conversation_id ASC
LIMIT ?
"""


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class _Worker:
    """One thread that runs jobs in order and hands each result back to the loop that asked."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="anvil-sqlite", daemon=True)
        self._thread.start()

    def run(self, job: Callable[[], _T]) -> asyncio.Future[_T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._jobs.put((loop, future, job))
        return future

    def stop(self) -> None:
        """Let the thread exit once the jobs already queued are done."""
        self._jobs.put(None)

    def _serve(self) -> None:
        while (item := self._jobs.get()) is not None:
            loop, future, job = item
            try:
                result = job()
            except BaseException as error:  # handed to the awaiting task, which re-raises it
                _deliver(loop, future.set_exception, future, error)
            else:
                _deliver(loop, future.set_result, future, result)


def _deliver(
    loop: asyncio.AbstractEventLoop, settle: Callable[[Any], None], future: asyncio.Future[Any], value: Any
) -> None:
    def settle_unless_cancelled() -> None:
        if not future.cancelled():
            settle(value)

    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
        loop.call_soon_threadsafe(settle_unless_cancelled)


class SqliteStore:
    """`ConversationStore` in a SQLite file (WAL mode). Open with `await SqliteStore.open(path)`."""

    def __init__(self, worker: _Worker, connection: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self._worker = worker
        self._connection = connection
        self._clock = clock
        self._next_purge = 0.0
        self._closed = False
        # Values are frozen, and a row whose version and updated_at match holds the same document.
        # Beside each conversation, its turns encoded (when this process wrote it), so the next
        # write encodes only the turn it adds.
        self._decoded: OrderedDict[str, tuple[Conversation, tuple[bytes, ...] | None]] = OrderedDict()

    @classmethod
    async def open(cls, path: Path, clock: Callable[[], float] = time.time) -> SqliteStore:
        """Open (creating if needed) the database at `path`, its parent directory and schema."""
        worker = _Worker()
        try:
            connection = await worker.run(lambda: _connect(path))
        except BaseException:
            worker.stop()
            raise
        return cls(worker, connection, clock)

    async def get(self, oid: str, conversation_id: str) -> Conversation | None:
        """The live conversation under this key, or None when missing or expired."""
        key, now = conversation_key(oid, conversation_id), self._clock()
        known, _ = self._decoded.get(key, (None, None))
        version, updated_at = (known.version, known.updated_at) if known else (-1, -1.0)

        def work(db: sqlite3.Connection) -> tuple[bool, str | None]:
            # The document comes back only when it differs from the decoded one this process holds.
            row = db.execute(_GET, (version, updated_at, key, now)).fetchone()
            return (False, None) if row is None else (True, row[0])

        found, document = await self._run(work)
        if not found:
            self._decoded.pop(key, None)
            return None
        if document is None and known is not None:
            self._decoded.move_to_end(key)
            return known
        return self._remember(from_document(pydantic_core.from_json(str(document))), None)

    async def create(self, conversation: Conversation) -> None:
        """Store a new conversation; `VersionConflict` if a live one already has its key."""
        c, now, purge = conversation, self._clock(), self._purge_due()
        turns = self._encoded_turns(c)
        row = (c.key, c.oid, c.conversation_id, c.version, c.updated_at, c.expires_at, _dumps(c, turns))

        def work(db: sqlite3.Connection) -> int:
            changed = db.execute(_CREATE, (*row, *_buckets(c), now)).rowcount
            if purge:
                _purge(db, now)
            return changed

        if await self._run(work) == 0:
            raise VersionConflict(c.key)
        self._remember(c, turns)

    async def replace(self, conversation: Conversation, expected_version: int) -> None:
        """Overwrite the stored conversation if its version is still `expected_version`."""
        c, now, purge = conversation, self._clock(), self._purge_due()
        turns = self._encoded_turns(c)
        values = (c.version, c.updated_at, c.expires_at, _dumps(c, turns))
        where, buckets = (c.key, expected_version, now), _buckets(c)

        def work(db: sqlite3.Connection) -> int:
            changed = db.execute(_REPLACE, (*values, *where, *buckets)).rowcount
            if changed == 0:
                changed = db.execute(_REPLACE_MOVING, (*values, *buckets, *where)).rowcount
            if purge:
                _purge(db, now)
            return changed

        if await self._run(work) == 0:
            raise VersionConflict(c.key)
        self._remember(c, turns)

    async def delete(self, oid: str, conversation_id: str) -> bool:
        """Remove a conversation; True if a live one was removed (an expired one goes silently)."""
        key, now = conversation_key(oid, conversation_id), self._clock()
        self._decoded.pop(key, None)

        def work(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "DELETE FROM conversations WHERE key = ? RETURNING expires_at > ?", (key, now)
            ).fetchone()
            return row is not None and bool(row[0])

        return await self._run(work)

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        """The user's live conversations, newest first, one page of at most `limit`."""
        now = self._clock()
        if cursor is None:
            updated_at, after_id, bucket = float("inf"), "", _NO_BUCKET_BOUND
        else:
            updated_at, after_id = decode_cursor(cursor)
            bucket = _bucket(updated_at)
        params = (oid, bucket, tid, now, updated_at, updated_at, after_id, limit + 1)

        def work(db: sqlite3.Connection) -> list[tuple[str, str | None, int, float, float]]:
            return db.execute(_LIST, params).fetchall()

        rows = await self._run(work)
        page = tuple(
            ConversationSummary(r[0], r[1], int(r[2]), float(r[3]), float(r[4])) for r in rows[:limit]
        )
        more = len(rows) > limit
        return ConversationPage(page, encode_cursor(page[-1]) if more and page else None)

    async def delete_all(self, oid: str, tid: str) -> int:
        """Remove every conversation of the user; returns how many live ones were removed."""
        now = self._clock()

        def work(db: sqlite3.Connection) -> int:
            rows = db.execute(
                "DELETE FROM conversations WHERE oid = ? AND json_extract(document, '$.tid') = ? "
                "RETURNING expires_at > ?",
                (oid, tid, now),
            )
            return sum(bool(row[0]) for row in rows.fetchall())

        return await self._run(work)

    async def check(self) -> None:
        """Raise `Unavailable` unless the database answers a trivial query."""
        await self._run(lambda db: db.execute("SELECT 1").fetchone())

    async def aclose(self) -> None:
        """Close the connection on its own thread and stop that thread; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            # Queued behind any call still running, so those finish before the close.
            await self._worker.run(self._connection.close)
        finally:
            self._worker.stop()

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise RuntimeError("the SQLite conversation store is closed")
        connection = self._connection
        try:
            return await self._worker.run(lambda: work(connection))
        except sqlite3.OperationalError as exc:
            # Locked by another process beyond the busy timeout, disk full, file gone: all are
            # conditions a later retry may get past, not bugs in the request.
            raise Unavailable(
                "The conversation store is busy or unavailable; retry shortly.", retry_after=1.0
            ) from exc

    def _encoded_turns(self, c: Conversation) -> tuple[bytes, ...]:
        """The turns of `c` encoded, reusing those of the copy held here (same `Turn` objects)."""
        known, encoded = self._decoded.get(c.key, (None, None))
        if known is not None and encoded is not None and known.turns and c.turns:
            # Turns form a window that slides forward: the held copy's turns from where `c`
            # starts, followed by the new ones.
            start = c.turns[0].number - known.turns[0].number
            kept = len(known.turns) - start
            if start >= 0 and kept <= len(c.turns) and all(map(operator.is_, known.turns[start:], c.turns)):
                return encoded[start:] + tuple(map(turn_json, c.turns[kept:]))
        return tuple(map(turn_json, c.turns))

    def _remember(self, conversation: Conversation, turns: tuple[bytes, ...] | None) -> Conversation:
        self._decoded[conversation.key] = (conversation, turns)
        self._decoded.move_to_end(conversation.key)
        if len(self._decoded) > DECODED_CACHE_SIZE:
            self._decoded.popitem(last=False)
        return conversation

    def _purge_due(self) -> bool:
        # Decided on the loop thread so `_next_purge` is only ever touched there.
        now = self._clock()
        if now < self._next_purge:
            return False
        self._next_purge = now + PURGE_INTERVAL
        return True


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: autocommit, so each single-statement write commits at once and
    # never holds the write lock between calls.
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        # Safe with WAL (a crash loses at most the last commits, never corrupts) and much faster.
        connection.execute("PRAGMA synchronous=NORMAL")
        _create_schema(connection)
    except BaseException:
        connection.close()
        raise
    return connection


def _create_schema(db: sqlite3.Connection) -> None:
    """Create the table and indexes, or bring a file from an earlier Anvil up to date.

    One immediate transaction, so processes opening the same file at once do it exactly once.
    """
    db.create_function("anvil_bucket", 1, _bucket, deterministic=True)
    db.execute("BEGIN IMMEDIATE")
    try:
        columns = {row[1] for row in db.execute("PRAGMA table_info(conversations)")}
        for column, time_column in _BUCKET_COLUMNS.items():
            if columns and column not in columns:
                db.execute(f"ALTER TABLE conversations ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
                db.execute(f"UPDATE conversations SET {column} = anvil_bucket({time_column})")
        for statement in filter(str.strip, _SCHEMA.split(";")):
            db.execute(statement)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _bucket(seconds: float) -> int:
    """The bucket a time (seconds since the epoch) falls in, as stored beside it."""
    return int(seconds // BUCKET_SECONDS)


def _buckets(c: Conversation) -> tuple[int, int]:
    """The (expiry_bucket, updated_bucket) columns of `c`."""
    return _bucket(c.expires_at), _bucket(c.updated_at)


def _purge(db: sqlite3.Connection, now: float) -> None:
    # Every expired row is in a bucket up to now's; the exact time decides within it.
    db.execute("DELETE FROM conversations WHERE expiry_bucket <= ? AND expires_at <= ?", (_bucket(now), now))


def _dumps(c: Conversation, turns: tuple[bytes, ...]) -> str:
    # pydantic-core's encoder is several times faster than the json module's on these documents,
    # and a turn writes the whole conversation.
    return document_json(c, turns).decode()
