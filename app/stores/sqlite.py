"""A conversation store in one SQLite file, safe to share between processes on one host.

Each conversation is one row: the JSON document of `codec.to_document`, beside the fields
that statements filter, sort or list on, and its ETag: a random token each write draws anew, so
a token read before a delete never matches the conversation created again after it. Every write
is guarded by the stored ETag and expiry in one statement (a creation under a quota, in one
transaction), so a write is atomic for every process sharing the file. What this process last
read or wrote of a conversation is kept decoded under its ETag (`held.py`), which is the truth
about that ETag for ever, since ETags never repeat: a read decodes the document only when the row
carries another ETag, a write encodes only the turns it adds.
The stdlib `sqlite3` module blocks, so each call runs on the store's one thread, which owns
its one connection and runs the writes waiting together in one transaction (`sqlite_thread.py`).
Opening the file (schema, upgrade, integrity check) is `sqlite_schema.py`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pydantic_core

from app.domain.conversation import (
    Conversation,
    ConversationPage,
    ConversationSummary,
    conversation_key,
)
from app.domain.ports import QuotaFull, Stored, VersionConflict
from app.errors import Unavailable
from app.stores.codec import from_document
from app.stores.cursor import decode_cursor, encode_cursor
from app.stores.held import Held, HeldConversations
from app.stores.sqlite_errors import unavailable_for
from app.stores.sqlite_schema import BUSY_TIMEOUT, connect, write_header
from app.stores.sqlite_thread import StoreThread

_T = TypeVar("_T")
# An alias, as `list` in the class body is `SqliteStore.list`.
_Rows = list[tuple[str, str | None, int, float, float]]

logger = logging.getLogger(__name__)

#: How often (seconds) a write also deletes every expired row, so the file does not grow forever.
PURGE_INTERVAL = 600.0

# Inserts, or takes over the key only when the row there has expired: one statement, so two
# processes creating the same conversation cannot both succeed. The SELECT form carries the
# quota: the row goes in only while the user keeps fewer live conversations than the bound
# (-1: no bound), counted by the same statement, under the file's write lock.
_CREATE = """
INSERT INTO conversations (
    key, oid, tid, conversation_id, version, updated_at, expires_at, title, turn_count, document, etag
)
SELECT :key, :oid, :tid, :conversation_id, :version, :updated_at, :expires_at, :title, :turn_count,
    :document, :etag
WHERE :quota < 0 OR (
    SELECT COUNT(*) FROM conversations WHERE oid = :oid AND tid = :tid AND expires_at > :now
) < :quota
ON CONFLICT (key) DO UPDATE SET
    tid = excluded.tid,
    version = excluded.version,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at,
    title = excluded.title,
    turn_count = excluded.turn_count,
    document = excluded.document,
    etag = excluded.etag
WHERE conversations.expires_at <= :now
"""

# The document comes back only when the row no longer carries the ETag this process holds decoded.
_GET = """
SELECT etag, CASE WHEN etag = ? THEN NULL ELSE document END
FROM conversations WHERE key = ? AND expires_at > ?
"""

_LIVE = "SELECT 1 FROM conversations WHERE key = ? AND expires_at > ?"

_REPLACE = """
UPDATE conversations
SET version = ?, updated_at = ?, expires_at = ?, title = ?, turn_count = ?, document = ?, etag = ?
WHERE key = ? AND etag = ? AND expires_at > ?
"""

# Newest first, ties by conversation id, continuing after the cursor's (updated_at, id). The
# bound `updated_at <= ?` is implied by the line after it, but spelt out it lets the index
# start at the cursor instead of walking every newer entry on each page.
_LIST = """
SELECT conversation_id, title, turn_count, updated_at, expires_at
FROM conversations
WHERE oid = ? AND updated_at <= ? AND tid = ? AND expires_at > ?
  AND (updated_at < ? OR conversation_id > ?)
ORDER BY updated_at DESC, conversation_id
LIMIT ?
"""

_DELETE = "DELETE FROM conversations WHERE key = ? RETURNING expires_at > ?"

_COUNT = "SELECT COUNT(*) FROM conversations WHERE oid = ? AND tid = ? AND expires_at > ?"

_DELETE_ALL = "DELETE FROM conversations WHERE oid = ? AND tid = ? RETURNING expires_at > ?"

_PURGE = "DELETE FROM conversations WHERE expires_at <= ?"


class SqliteStore:
    """`ConversationStore` in a SQLite file (WAL mode). Open with `await SqliteStore.open(path)`.

    The ETag of a stored conversation is a random token drawn anew by every write (96 bits, so
    no two writes of any process sharing the file draw the same).
    """

    def __init__(
        self,
        thread: ThreadPoolExecutor,
        connection: sqlite3.Connection,
        clock: Callable[[], float],
        path: Path | None = None,
    ) -> None:
        self._thread = StoreThread(thread, connection)
        #: The database file, named in what the operator is told to fix.
        self._path = path
        self._connection = connection
        self._clock = clock
        self._next_purge = 0.0
        #: Only touched on the event loop, never across an await (see `held.py`).
        self._held = HeldConversations()
        #: Set by a database error other than "busy": readiness then checks the file's pages.
        self._damaged = False

    @classmethod
    async def open(cls, path: Path, clock: Callable[[], float] = time.time) -> SqliteStore:
        """Open (creating if needed) the database at `path`, its parent directory and schema.

        Raises `StartupError` if the folder cannot hold the file, or the file is damaged or
        holds conversations in a layout this version does not read.
        """
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="anvil-sqlite")
        try:
            connection = await asyncio.get_running_loop().run_in_executor(thread, connect, path, BUSY_TIMEOUT)
        except BaseException:
            thread.shutdown(wait=False)
            raise
        return cls(thread, connection, clock, path)

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        """The live conversation under this key and its ETag, or None when missing or expired.

        The document is read and decoded only when the row's ETag is not the one held decoded
        (`held.py`): a 50-turn document takes 65 to 125 µs to decode and 45 to 75 µs to encode
        whole. 16 tasks each reading and writing a 50-turn conversation on one core: 450 µs of
        CPU a turn decoding every read and encoding every write, 210 so; through the server
        (`bench/compare.py`, 12 rounds) a turn with history costs 0.73x what the plain store's
        did, batches and this together (docs/performance.md).
        """
        key = conversation_key(oid, conversation_id)
        held = self._held.get(key)
        params = (held.etag if held is not None else "", key, self._clock())

        def work(db: sqlite3.Connection) -> tuple[str, str | None] | None:
            row: tuple[str, str | None] | None = db.execute(_GET, params).fetchone()
            return row

        row = await self._run(work)
        if row is None:
            return None
        etag, document = row
        # The entry taken before awaiting, or one a write kept meanwhile (a write is kept as it
        # is made, so a read waiting beside it finds the ETag it is about to see): whichever
        # carries the row's ETag is its value (see `held.py`).
        for known in (held, self._held.get(key)):
            if known is not None and known.etag == etag:
                return Stored(known.conversation, etag)
        conversation = from_document(pydantic_core.from_json(str(document)))
        self._held.keep(key, Held(etag, conversation, None, len(str(document))))
        return Stored(conversation, etag)

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        """Store a new conversation and return its ETag; `VersionConflict` if a live one has its key,
        `QuotaFull` if its user already keeps `max_conversations` live ones.

        An expired conversation under the same key is replaced.
        """
        c, now, etag = conversation, self._clock(), _new_etag()
        turns, document = self._held.encode(c)
        quota = -1 if max_conversations is None else max_conversations
        params = {
            "key": c.key,
            "oid": c.oid,
            "tid": c.tid,
            "conversation_id": c.conversation_id,
            "version": c.version,
            "updated_at": c.updated_at,
            "expires_at": c.expires_at,
            "title": c.title,
            "turn_count": c.turn_count,
            "document": document,
            "etag": etag,
            "quota": quota,
            "now": now,
        }

        def create(db: sqlite3.Connection) -> int:
            """0 when created, -1 when a live conversation has the key, else how many the user keeps."""
            if db.execute(_CREATE, params).rowcount:
                return 0
            if quota < 0 or db.execute(_LIVE, (c.key, now)).fetchone() is not None:
                return -1
            return max(int(db.execute(_COUNT, (c.oid, c.tid, now)).fetchone()[0]), 1)

        def work(db: sqlite3.Connection) -> int:
            # Without a quota one statement decides; with one, telling a taken key from a full
            # quota takes a second look, inside the same transaction so both see one state.
            if quota < 0 or db.in_transaction:  # in a batch's transaction (`sqlite_thread.py`)
                return create(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                outcome = create(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return outcome

        outcome = await self._write(Held(etag, c, turns, len(document)), work, now)
        if outcome < 0:
            raise VersionConflict(c.key)
        if outcome > 0:
            raise QuotaFull(outcome)
        return etag

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        """Overwrite the stored conversation if it still carries `if_match`; returns the new ETag.

        Raises `VersionConflict` when the stored conversation changed, expired or is gone.
        """
        c, now, etag = conversation, self._clock(), _new_etag()
        turns, document = self._held.encode(c)
        columns = (c.version, c.updated_at, c.expires_at, c.title, c.turn_count, document, etag)
        params = (*columns, c.key, if_match, now)

        def work(db: sqlite3.Connection) -> int:
            changed: int = db.execute(_REPLACE, params).rowcount
            return changed

        if not await self._write(Held(etag, c, turns, len(document)), work, now):
            raise VersionConflict(c.key)
        return etag

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        """Remove a conversation; True if a live one was removed (an expired one goes silently).

        `if_match` is not needed: the one statement that deletes also reports whether the row
        was live.
        """
        key = conversation_key(oid, conversation_id)
        params = (key, self._clock())

        def work(db: sqlite3.Connection) -> bool:
            row = db.execute(_DELETE, params).fetchone()
            return row is not None and bool(row[0])

        try:
            return await self._run(work)
        finally:
            # Not needed to be right (no row will carry a held ETag again), only to free memory.
            self._held.forget(key)

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        """The user's live conversations in tenant `tid`, newest first, one page of at most `limit`.

        Raises `InvalidCursor` for a cursor this store did not issue.
        """
        # Conversation ids are never empty, so "" sorts before every one of them.
        updated_at, after_id = decode_cursor(cursor) if cursor is not None else (float("inf"), "")
        params = (oid, updated_at, tid, self._clock(), updated_at, after_id, limit + 1)

        def work(db: sqlite3.Connection) -> _Rows:
            rows: _Rows = db.execute(_LIST, params).fetchall()
            return rows

        rows = await self._run(work)
        page = tuple(ConversationSummary(*row) for row in rows[:limit])
        more = len(rows) > limit
        return ConversationPage(page, encode_cursor(page[-1]) if more and page else None)

    async def delete_all(self, oid: str, tid: str) -> int:
        """Remove every conversation of the user in tenant `tid`; returns how many live ones were removed."""
        params = (oid, tid, self._clock())

        def work(db: sqlite3.Connection) -> int:
            return sum(bool(live) for (live,) in db.execute(_DELETE_ALL, params).fetchall())

        try:
            return await self._run(work)
        finally:
            self._held.forget_owner(conversation_key(oid, ""))

    async def count(self, oid: str, tid: str) -> int:
        """How many live conversations the user has in the tenant (one indexed query)."""
        params = (oid, tid, self._clock())

        def work(db: sqlite3.Connection) -> int:
            (counted,) = db.execute(_COUNT, params).fetchone()
            return int(counted)

        return await self._run(work)

    async def check(self, *, write: bool = False) -> None:
        """Raise `Unavailable` unless the database answers; after a database error, unless its
        pages pass SQLite's quick check again (so readiness stays down while the file is damaged);
        with `write`, unless a transaction that rewrites the file's header commits (a full disk
        or a read-only file refuses it), leaving every conversation as it was."""
        if write:
            await self._run(write_header)
        if not self._damaged:
            await self._run(lambda db: db.execute("SELECT 1").fetchone())
            return
        verdict = await self._run(lambda db: db.execute("PRAGMA quick_check(1)").fetchone())
        if verdict is None or verdict[0] != "ok":
            raise Unavailable("The conversation store's database file is damaged.")
        self._damaged = False

    async def aclose(self) -> None:
        """Close the connection once the calls already waiting for it are done; later calls raise.

        Closing again does nothing.
        """
        await self._thread.aclose()

    async def _run(self, work: Callable[[sqlite3.Connection], _T], *, write: bool = False) -> _T:
        """Run `work` on the store's thread with its connection, and return its result; a
        conversation write (`write`) shares its batch's transaction (`sqlite_thread.py`).

        One thread runs the calls, so the connection is never used by two at once, even when a
        caller is cancelled while its statement runs (the statement runs to its end, then the
        next batch). A thread of the store's own, not `anyio.to_thread.run_sync` with a capacity
        limiter of one: anyio's limiter and cancel scope on every call cost 1.28x the CPU per
        call of a plain executor (`bench/compare.py`, 12 rounds, a 2026-07-28 turn with
        history, docs/performance.md), and a task cancelled by asyncio itself lets go of anyio's
        limiter while its statement still runs, which then needs a lock of its own besides.
        """
        try:
            return await self._thread.run(work, write=write)
        except sqlite3.OperationalError as exc:
            raise unavailable_for(exc, self._path) from exc
        except sqlite3.DatabaseError as exc:
            # A damaged file ("database disk image is malformed"): an outage until it is
            # restored, never a crash of the request. Readiness reports it from now on.
            self._damaged = True
            logger.error("The SQLite conversation store failed: %s", exc)
            raise Unavailable(
                "The conversation store is unavailable; retry later.", retry_after=30.0
            ) from exc

    async def _write(self, held: Held, work: Callable[[sqlite3.Connection], int], now: float) -> int:
        """Run one conversation write of `held`, then the purge of expired rows when it is due.

        `held` is kept before the write as well as after it: a read waiting beside the write
        then finds the ETag it is about to see already decoded, and a read that ran just
        before the write may have kept an older value in its place. Should the write not land,
        the entry names an ETag no row will ever carry, which costs the next read a decode.
        """
        key = held.conversation.key
        self._held.keep(key, held)
        outcome = await self._run(work, write=True)
        self._held.keep(key, held)
        if now >= self._next_purge:
            # Decided on the event loop, so `_next_purge` is only ever touched there.
            self._next_purge = now + PURGE_INTERVAL
            try:
                await self._run(lambda db: db.execute(_PURGE, (now,)))
            except Unavailable:
                # The write itself landed; expired rows wait for the next purge.
                logger.warning("Could not purge expired conversations; trying again later")
        return outcome


def _new_etag() -> str:
    """A fresh ETag: 96 random bits, so no read made before any earlier write can match it."""
    return secrets.token_hex(12)
