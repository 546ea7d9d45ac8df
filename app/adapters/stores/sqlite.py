"""A conversation store in one SQLite file, safe to share between processes on one host.

Each conversation is one row: the JSON document of `codec.to_document`, beside the fields
that statements filter, sort or list on. Every write is a single statement guarded by the
stored version and expiry, so a write is atomic for every process sharing the file. The stdlib
`sqlite3` module blocks, so the calls run on a worker thread of the store's own (`worker.py`),
one at a time on the store's one connection; calls made while the thread is busy wait for it
together and are then run in one go, their writes in one transaction (`SqliteStore._run`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pydantic_core

from app.adapters.stores.codec import encode_document, encode_turn, from_document
from app.adapters.stores.cursor import decode_cursor, encode_cursor
from app.adapters.stores.worker import Worker
from app.domain.conversation import (
    Conversation,
    ConversationPage,
    ConversationSummary,
    Turn,
    conversation_key,
)
from app.errors import Unavailable
from app.ports import Stored, VersionConflict

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

#: Seconds a statement waits for another process's write lock before giving up.
BUSY_TIMEOUT = 5.0
#: How often (seconds) a write also deletes every expired row, so the file does not grow forever.
PURGE_INTERVAL = 600.0
#: Conversations each process keeps decoded (see `SqliteStore._held`).
DECODED_CONVERSATIONS = 1024

#: The table's columns, in order: a file whose table has others was written by an earlier layout.
COLUMNS = (
    "key",
    "oid",
    "tid",
    "conversation_id",
    "version",
    "updated_at",
    "expires_at",
    "title",
    "turn_count",
    "document",
)

_TABLE = """
CREATE TABLE IF NOT EXISTS conversations (
    key TEXT PRIMARY KEY,
    oid TEXT NOT NULL,
    tid TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    title TEXT,
    turn_count INTEGER NOT NULL,
    document TEXT NOT NULL
)
"""

_INDEXES = (
    # A user's conversations, newest first: listings and delete_all.
    "CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations (oid, updated_at)",
    # Lets the periodic purge find expired rows without scanning the table while holding the lock.
    "CREATE INDEX IF NOT EXISTS conversations_by_expiry ON conversations (expires_at)",
)

# Inserts, or takes over the key only when the row there has expired: one statement, so two
# processes creating the same conversation cannot both succeed.
_CREATE = """
INSERT INTO conversations (
    key, oid, tid, conversation_id, version, updated_at, expires_at, title, turn_count, document
)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET
    tid = excluded.tid,
    version = excluded.version,
    updated_at = excluded.updated_at,
    expires_at = excluded.expires_at,
    title = excluded.title,
    turn_count = excluded.turn_count,
    document = excluded.document
WHERE conversations.expires_at <= ?
"""

# The document comes back only when it is not the version this process already holds decoded.
_GET = """
SELECT version, updated_at, CASE WHEN version = ? AND updated_at = ? THEN NULL ELSE document END
FROM conversations WHERE key = ? AND expires_at > ?
"""

_REPLACE = """
UPDATE conversations
SET version = ?, updated_at = ?, expires_at = ?, title = ?, turn_count = ?, document = ?
WHERE key = ? AND version = ? AND expires_at > ?
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


class Held(NamedTuple):
    """A conversation this process last read or wrote, decoded (see `SqliteStore._held`)."""

    conversation: Conversation
    #: Its turns as JSON text (`codec.encode_turn`) when this process wrote it; None after a read.
    turns: tuple[str, ...] | None


class _Call(NamedTuple):
    """A call waiting for the worker thread, and the future its caller awaits on the loop."""

    work: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    #: A conversation write: run in one transaction with the other writes waiting with it.
    write: bool


#: What a call came to on the worker thread: its result, or the exception it raised.
_Outcome = tuple[_Call, Any, BaseException | None]
# Aliases, as `list` in the class body is `SqliteStore.list`.
_Calls = list[_Call]
_Outcomes = list[_Outcome]


class SqliteStore:
    """`ConversationStore` in a SQLite file (WAL mode). Open with `await SqliteStore.open(path)`.

    The ETag of a stored conversation is its version, which every write increases by one.
    """

    def __init__(self, worker: Worker, connection: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self._connection = connection
        self._clock = clock
        self._worker = worker
        self._next_purge = 0.0
        # Only read and set on the worker thread, so a call never finds the connection closed
        # under it.
        self._closed = False
        #: Set by a database error other than "busy": readiness then checks the file's pages.
        self._damaged = False
        # The conversations this process last read or wrote, decoded, by key. A read whose row
        # still has the same version and update time gets this value instead of the document:
        # decoding a 50-turn document is about 35 µs, and a 2026-07-28 turn with history
        # measured about 307 µs of CPU per call under load with this against about 335 µs
        # without (docs/performance.md). What this process wrote also keeps its turns encoded,
        # so the next write encodes only the new turn: 4 µs instead of 22 µs for 50 turns in
        # process, and under load 0.88x the bare SDK's CPU per call against 0.95x.
        # Values are frozen, so nobody can change one behind the store's back.
        self._held: OrderedDict[str, Held] = OrderedDict()
        # Calls waiting for the worker thread, in the order they were made. The worker takes all
        # of them at once (`_run_waiting`); the lock makes taking them and adding one atomic.
        self._waiting: _Calls = []
        self._waiting_lock = threading.Lock()

    @classmethod
    async def open(cls, path: Path, clock: Callable[[], float] = time.time) -> SqliteStore:
        """Open (creating if needed) the database at `path`, its parent directory and schema.

        Raises `StartupError` if the folder cannot hold the file, or the file is damaged or
        holds conversations in a layout this version does not read.
        """
        worker = Worker("anvil-sqlite")
        try:
            connection = await worker.run(partial(_connect, path))
        except BaseException:
            worker.stop()
            raise
        return cls(worker, connection, clock)

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        """The live conversation under this key and its ETag, or None when missing or expired."""
        key = conversation_key(oid, conversation_id)
        held = self._held.get(key)
        known = (held.conversation.version, held.conversation.updated_at) if held else (-1, -1.0)
        params = (*known, key, self._clock())

        def work(db: sqlite3.Connection) -> tuple[int, float, str | None] | None:
            row: tuple[int, float, str | None] | None = db.execute(_GET, params).fetchone()
            return row

        row = await self._run(work)
        if row is None:
            self._held.pop(key, None)
            return None
        version, _, document = row
        if document is None and held is not None:
            self._held.move_to_end(key)
            return Stored(held.conversation, str(version))
        conversation = from_document(pydantic_core.from_json(str(document)))
        self._remember(Held(conversation, None))
        return Stored(conversation, str(version))

    async def create(self, conversation: Conversation) -> str:
        """Store a new conversation and return its ETag; `VersionConflict` if a live one has its key.

        An expired conversation under the same key is replaced.
        """
        c, now = conversation, self._clock()
        held, document = self._encode(c)
        params = (c.key, c.oid, c.tid, c.conversation_id, *_columns(c), document, now)
        return await self._write(held, _CREATE, params)

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        """Overwrite the stored conversation if it still carries `if_match`; returns the new ETag.

        Raises `VersionConflict` when the stored conversation changed, expired or is gone.
        """
        c = conversation
        expected = _version_of(if_match)
        if expected is None:  # not an ETag this store issued, so no stored row carries it
            raise VersionConflict(c.key)
        held, document = self._encode(c)
        return await self._write(held, _REPLACE, (*_columns(c), document, c.key, expected, self._clock()))

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        """Remove a conversation; True if a live one was removed (an expired one goes silently).

        `if_match` is not needed: the one statement that deletes also reports whether the row
        was live.
        """
        key = conversation_key(oid, conversation_id)
        self._held.pop(key, None)
        params = (key, self._clock())

        def work(db: sqlite3.Connection) -> bool:
            row = db.execute(_DELETE, params).fetchone()
            return row is not None and bool(row[0])

        return await self._run(work)

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        """The user's live conversations in tenant `tid`, newest first, one page of at most `limit`.

        Raises `InvalidCursor` for a cursor this store did not issue.
        """
        # Conversation ids are never empty, so "" sorts before every one of them.
        updated_at, after_id = decode_cursor(cursor) if cursor is not None else (float("inf"), "")
        params = (oid, updated_at, tid, self._clock(), updated_at, after_id, limit + 1)

        def work(db: sqlite3.Connection) -> list[tuple[str, str | None, int, float, float]]:
            rows: list[tuple[str, str | None, int, float, float]] = db.execute(_LIST, params).fetchall()
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

        return await self._run(work)

    async def count(self, oid: str, tid: str) -> int:
        """How many live conversations the user has in the tenant (one indexed query)."""
        params = (oid, tid, self._clock())

        def work(db: sqlite3.Connection) -> int:
            (counted,) = db.execute(_COUNT, params).fetchone()
            return int(counted)

        return await self._run(work)

    async def check(self) -> None:
        """Raise `Unavailable` unless the database answers; after a database error, unless its
        pages pass SQLite's quick check again (so readiness stays down while the file is damaged)."""
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

        def close() -> None:
            if not self._closed:
                self._closed = True
                self._connection.close()

        if self._worker.stopped:
            return
        if self._waiting:  # made before this, but not handed to the worker yet
            self._hand_over_waiting()
        try:
            await self._worker.run(close)
        finally:
            self._worker.stop()

    async def _run(self, work: Callable[[sqlite3.Connection], _T], *, write: bool = False) -> _T:
        """Run `work` on the worker thread with the store's connection, and return its result.

        Calls made while the thread is busy wait for it together, and it then takes all of them
        at once: the conversation writes (`write`) first, in one transaction, then the others
        in the order they were made. Under load a turn then shares the thread's wake-up, its
        locks and the pages every write touches (page 1, the free list, the two indexes) with
        the turns waiting beside it: a 2026-07-28 turn with history measured 0.85x the bare
        SDK's CPU per call against 0.98x with one call per hand-over and one transaction per
        write (docs/performance.md). Every call waiting in one batch was made before any of
        them was answered, so running them in this order is as if they had come in it.
        """
        if self._worker.stopped:
            raise RuntimeError("the SQLite conversation store is closed")
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        with self._waiting_lock:
            self._waiting.append(_Call(work, future, write))
            first = len(self._waiting) == 1
        if first:
            # Asked for at the end of this pass of the event loop, so that the calls made in
            # the same pass wait together (about 16 per batch under load, against 8 when asked
            # for at once; 0.85x the CPU of the bare SDK's call against 0.95x).
            asyncio.get_running_loop().call_soon(self._hand_over_waiting)
        try:
            return await future
        except sqlite3.OperationalError as exc:
            # Locked by another process beyond the busy timeout, disk full, file gone: all are
            # conditions a later retry may get past, not bugs in the request.
            raise Unavailable(
                "The conversation store is busy or unavailable; retry shortly.", retry_after=1.0
            ) from exc
        except sqlite3.DatabaseError as exc:
            # A damaged file ("database disk image is malformed"): an outage until it is
            # restored, never a crash of the request. Readiness reports it from now on.
            self._damaged = True
            logger.error("The SQLite conversation store failed: %s", exc)
            raise Unavailable(
                "The conversation store is unavailable; retry later.", retry_after=30.0
            ) from exc

    def _hand_over_waiting(self) -> None:
        """Ask the worker thread for the calls waiting (see `_run`); it takes them when it starts."""
        if self._worker.stopped:  # closed since the first of them was made
            _settle_outcomes(_refused(self._take_waiting()))
            return
        self._worker.run(self._run_waiting).add_done_callback(_settle)

    def _take_waiting(self) -> _Calls:
        with self._waiting_lock:
            calls, self._waiting = self._waiting, []
        return calls

    def _run_waiting(self) -> _Outcomes:
        """On the worker thread: run every call waiting, writes first (see `_run`)."""
        calls = self._take_waiting()
        if self._closed:
            return _refused(calls)
        db = self._connection
        writes = [call for call in calls if call.write]
        outcomes = _run_together(db, writes) if len(writes) > 1 else [_run_one(db, w) for w in writes]
        return outcomes + [_run_one(db, call) for call in calls if not call.write]

    def _encode(self, c: Conversation) -> tuple[Held, str]:
        """`c` as held after writing it, and its document as JSON text."""
        turns = _encoded_turns(c.turns, self._held.get(c.key))
        return Held(c, turns), encode_document(c, turns)

    async def _write(self, held: Held, statement: str, params: tuple[object, ...]) -> str:
        """Run one guarded write of `held` (and the purge when due); its ETag, or `VersionConflict`."""
        c, now, purge = held.conversation, self._clock(), self._purge_due()

        def work(db: sqlite3.Connection) -> int:
            changed: int = db.execute(statement, params).rowcount
            if purge:
                db.execute(_PURGE, (now,))
            return changed

        # Remembered before the write as well as after: a read waiting beside this write then
        # finds the version it is about to see already decoded, instead of decoding the document
        # again (what every turn but the first does on a busy conversation).
        self._remember(held)
        try:
            changed = await self._run(work, write=True)
        except BaseException:
            self._held.pop(c.key, None)
            raise
        if changed == 0:
            self._held.pop(c.key, None)
            raise VersionConflict(c.key)
        # A read that ran just before the write may have put the older version back.
        self._remember(held)
        return str(c.version)

    def _remember(self, held: Held) -> None:
        key = held.conversation.key
        self._held[key] = held
        self._held.move_to_end(key)
        if len(self._held) > DECODED_CONVERSATIONS:
            self._held.popitem(last=False)

    def _purge_due(self) -> bool:
        # Decided on the event loop, so `_next_purge` is only ever touched there.
        now = self._clock()
        if now < self._next_purge:
            return False
        self._next_purge = now + PURGE_INTERVAL
        return True


def _run_one(db: sqlite3.Connection, call: _Call) -> _Outcome:
    try:
        return call, call.work(db), None
    except Exception as error:  # handed to the caller, which re-raises it
        return call, None, error


def _run_together(db: sqlite3.Connection, writes: _Calls) -> _Outcomes:
    """Run `writes` in one transaction. If any of them fails, none is kept and all get its error:
    a statement that fails here means the file is in trouble, not that one write was wrong (a
    write that loses a race changes no row and fails nothing)."""
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            results = [call.work(db) for call in writes]
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    except Exception as error:
        return [(call, None, error) for call in writes]
    return [(call, result, None) for call, result in zip(writes, results, strict=True)]


def _refused(calls: _Calls) -> _Outcomes:
    closed = RuntimeError("the SQLite conversation store is closed")
    return [(call, None, closed) for call in calls]


def _settle(done: asyncio.Future[_Outcomes]) -> None:
    _settle_outcomes(done.result())


def _settle_outcomes(outcomes: _Outcomes) -> None:
    """On the loop: hand every caller of a batch its outcome (unless it stopped waiting)."""
    for call, result, error in outcomes:
        if call.future.cancelled():
            continue
        if error is None:
            call.future.set_result(result)
        else:
            call.future.set_exception(error)


class StartupError(RuntimeError):
    """The store cannot start; the message says why in one line, and what to do."""


def _connect(path: Path) -> sqlite3.Connection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StartupError(
            f"the data folder {path.parent} cannot be used ({error.strerror or error}): "
            "set ANVIL_DATA_DIR to a folder Anvil can write to"
        ) from None
    try:
        return _open_database(path)
    except sqlite3.DatabaseError as error:
        raise StartupError(
            f"{path} is not a usable SQLite database ({' '.join(str(error).split())}): restore it "
            "from a backup, or move "
            "it away to start with no conversations"
        ) from None


def _open_database(path: Path) -> sqlite3.Connection:
    # isolation_level=None: autocommit, so each single-statement write commits at once and never
    # holds the write lock between calls. Calls come from whichever worker thread is free, one
    # at a time (the store's limiter), hence check_same_thread=False.
    connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        # Safe with WAL (a crash loses at most the last commits, never corrupts) and much faster.
        connection.execute("PRAGMA synchronous=NORMAL")
        _create_schema(connection, path)
        # Reads every page once: a damaged file is refused here rather than failing requests.
        verdict = connection.execute("PRAGMA quick_check(1)").fetchone()
        if verdict is None or verdict[0] != "ok":
            raise sqlite3.DatabaseError(
                f"its integrity check failed: {verdict[0] if verdict else 'no answer'}"
            )
    except BaseException:
        connection.close()
        raise
    return connection


def _create_schema(db: sqlite3.Connection, path: Path) -> None:
    """Create the table and its indexes, or refuse a file whose table has another layout.

    One immediate transaction, so processes opening the same new file at once agree on it.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(_TABLE)
        columns = tuple(row[1] for row in db.execute("PRAGMA table_info(conversations)"))
        if columns != COLUMNS:
            raise StartupError(
                f"{path} holds conversations in a layout this version of Anvil does not read; "
                "move the file away (a new one is created in its place) and start again."
            )
        for statement in _INDEXES:
            db.execute(statement)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _columns(c: Conversation) -> tuple[int, float, float, str | None, int]:
    """The values a write sets besides the document: version, updated_at, expires_at, title, turn_count."""
    return c.version, c.updated_at, c.expires_at, c.title, c.turn_count


def _encoded_turns(turns: tuple[Turn, ...], held: Held | None) -> tuple[str, ...]:
    """`turns` as JSON text, reusing the text of those `held` already has.

    A turn appended to a held conversation keeps the turns before it (the oldest may be dropped),
    so its encoded ones are a slice of the held ones; anything else is encoded whole.
    """
    if held is not None and held.turns is not None and held.conversation.turns and turns:
        before = held.conversation.turns
        start = turns[0].number - before[0].number  # where `turns` begin among the held ones
        kept = len(before) - start
        # Tuples compare element by element, and the same turn object compares equal at once.
        if 0 <= start < len(before) and turns[:kept] == before[start:]:
            return held.turns[start:] + tuple(encode_turn(t) for t in turns[kept:])
    return tuple(encode_turn(t) for t in turns)


def _version_of(etag: str) -> int | None:
    """The version an ETag of this store names, or None if it is not one (`str(version)` exactly)."""
    try:
        version = int(etag)
    except ValueError:
        return None
    return version if str(version) == etag else None
