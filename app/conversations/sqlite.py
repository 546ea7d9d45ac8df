"""A conversation store in one SQLite file, safe to share between processes on one host.

The stdlib `sqlite3` module blocks, so every call runs on one dedicated worker thread that
owns the connection; the event loop only awaits its results. Writes are single statements
guarded by the stored version and expiry, so they stay atomic across processes as well.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pydantic_core

from app.conversations.codec import from_document, to_document
from app.conversations.cursor import decode_cursor, encode_cursor
from app.conversations.model import Conversation, conversation_key
from app.conversations.store import ConversationPage, ConversationSummary, VersionConflict
from app.errors import Unavailable

_T = TypeVar("_T")

#: Seconds a statement waits for another process's write lock before giving up.
BUSY_TIMEOUT = 5.0
#: Conversations kept decoded per process: a turn on a conversation whose stored version this
#: process already holds skips decoding the document (the read still asks the database).
DECODED_CACHE_SIZE = 1024
#: How often (seconds) a write also deletes every expired row, so the file does not grow forever.
PURGE_INTERVAL = 600.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    key TEXT PRIMARY KEY,
    oid TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    document TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations (oid, updated_at);
-- Lets the periodic purge find expired rows without scanning the table while holding the lock.
CREATE INDEX IF NOT EXISTS conversations_by_expiry ON conversations (expires_at);
"""

# Inserts, or takes over the key only when the row there has expired: one statement, so two
# processes creating the same conversation cannot both succeed.
_CREATE = """
INSERT INTO conversations (key, oid, conversation_id, version, updated_at, expires_at, document)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    version = excluded.version,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at,
    document = excluded.document
WHERE conversations.expires_at <= ?
"""

_GET = """
SELECT CASE WHEN version = ? AND updated_at = ? THEN NULL ELSE document END
FROM conversations WHERE key = ? AND expires_at > ?
"""

_REPLACE = """
UPDATE conversations SET version = ?, updated_at = ?, expires_at = ?, document = ?
WHERE key = ? AND version = ? AND expires_at > ?
"""


# Newest first, ties by conversation id; the cursor is the (updated_at, conversation_id) of the
# last row of the previous page.
_LIST = """
SELECT conversation_id, json_extract(document, '$.title'),
       -- turnCount is absent from documents written before it existed: derive it from the turns.
       COALESCE(json_extract(document, '$.turnCount'), json_extract(document, '$.turns[#-1].n'),
                json_extract(document, '$.dropped')),
       updated_at, expires_at
FROM conversations
WHERE oid = ? AND json_extract(document, '$.tid') = ? AND expires_at > ?
  AND (updated_at < ? OR (updated_at = ? AND conversation_id > ?))
ORDER BY updated_at DESC, conversation_id ASC
LIMIT ?
"""


class SqliteStore:
    """`ConversationStore` in a SQLite file (WAL mode). Open with `await SqliteStore.open(path)`."""

    def __init__(
        self, executor: ThreadPoolExecutor, connection: sqlite3.Connection, clock: Callable[[], float]
    ) -> None:
        self._executor = executor
        self._connection = connection
        self._clock = clock
        self._next_purge = 0.0
        self._closed = False
        # Values are frozen, and a row whose version and updated_at match holds the same document.
        self._decoded: OrderedDict[str, Conversation] = OrderedDict()

    @classmethod
    async def open(cls, path: Path, clock: Callable[[], float] = time.time) -> SqliteStore:
        """Open (creating if needed) the database at `path`, its parent directory and schema."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="anvil-sqlite")
        try:
            connection = await asyncio.wrap_future(executor.submit(_connect, path))
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, connection, clock)

    async def get(self, oid: str, conversation_id: str) -> Conversation | None:
        """The live conversation under this key, or None when missing or expired."""
        key, now = conversation_key(oid, conversation_id), self._clock()
        known = self._decoded.get(key)
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
        return self._remember(from_document(pydantic_core.from_json(str(document))))

    async def create(self, conversation: Conversation) -> None:
        """Store a new conversation; `VersionConflict` if a live one already has its key."""
        c, now, purge = conversation, self._clock(), self._purge_due()
        row = (c.key, c.oid, c.conversation_id, c.version, c.updated_at, c.expires_at, _dumps(c), now)

        def work(db: sqlite3.Connection) -> int:
            changed = db.execute(_CREATE, row).rowcount
            if purge:
                _purge(db, now)
            return changed

        if await self._run(work) == 0:
            raise VersionConflict(c.key)
        self._remember(c)

    async def replace(self, conversation: Conversation, expected_version: int) -> None:
        """Overwrite the stored conversation if its version is still `expected_version`."""
        c, now, purge = conversation, self._clock(), self._purge_due()
        params = (c.version, c.updated_at, c.expires_at, _dumps(c), c.key, expected_version, now)

        def work(db: sqlite3.Connection) -> int:
            changed = db.execute(_REPLACE, params).rowcount
            if purge:
                _purge(db, now)
            return changed

        if await self._run(work) == 0:
            raise VersionConflict(c.key)
        self._remember(c)

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
        updated_at, after_id = decode_cursor(cursor) if cursor is not None else (float("inf"), "")

        def work(db: sqlite3.Connection) -> list[tuple[str, str | None, int, float, float]]:
            return db.execute(_LIST, (oid, tid, now, updated_at, updated_at, after_id, limit + 1)).fetchall()

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
            await asyncio.wrap_future(self._executor.submit(self._connection.close))
        finally:
            # The queue is empty now, so the idle thread exits without being waited on.
            self._executor.shutdown(wait=False)

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise RuntimeError("the SQLite conversation store is closed")
        future = self._executor.submit(work, self._connection)
        try:
            return await asyncio.wrap_future(future)
        except sqlite3.OperationalError as exc:
            # Locked by another process beyond the busy timeout, disk full, file gone: all are
            # conditions a later retry may get past, not bugs in the request.
            raise Unavailable(
                "The conversation store is busy or unavailable; retry shortly.", retry_after=1.0
            ) from exc

    def _remember(self, conversation: Conversation) -> Conversation:
        self._decoded[conversation.key] = conversation
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
        connection.executescript(_SCHEMA)
    except BaseException:
        connection.close()
        raise
    return connection


def _purge(db: sqlite3.Connection, now: float) -> None:
    db.execute("DELETE FROM conversations WHERE expires_at <= ?", (now,))


def _dumps(c: Conversation) -> str:
    # pydantic-core's encoder is several times faster than the json module's on these documents,
    # and a turn writes the whole conversation.
    return pydantic_core.to_json(to_document(c)).decode()
