"""A conversation store in one SQLite file, safe to share between processes on one host.

Each conversation is one row: the JSON document of `codec.to_document`, beside the fields
that statements filter, sort or list on, and its ETag: a random token each write draws anew, so
a token read before a delete never matches the conversation created again after it. Every write
is guarded by the stored ETag and expiry in one statement (a creation under a quota, in one
transaction), so a write is atomic for every process sharing the file. What this process last
read or wrote of a conversation is kept decoded under its ETag (`decoded.py`), which is the truth
about that ETag for ever, since ETags never repeat. The stdlib
`sqlite3` module blocks, so the calls run on a worker thread of the store's own (`worker.py`),
one at a time on the store's one connection; calls made while the thread is busy wait for it
together and are then run in one go, their writes in one transaction (`SqliteStore._run`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pydantic_core

from app.domain.conversation import (
    Conversation,
    ConversationPage,
    ConversationSummary,
    conversation_key,
)
from app.domain.ports import QuotaFull, Stored, VersionConflict
from app.errors import Unavailable
from app.private_files import describe, private_file, private_folder, warn_if_open
from app.stores.codec import from_document
from app.stores.cursor import decode_cursor, encode_cursor
from app.stores.decoded import Decoded, Held
from app.stores.worker import Worker

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

#: Seconds a statement waits for another process's write lock before giving up.
BUSY_TIMEOUT = 5.0
#: How often (seconds) a write also deletes every expired row, so the file does not grow forever.
PURGE_INTERVAL = 600.0

#: The table's columns, in order, as Anvil 0.4 and earlier wrote them: such a file is upgraded
#: in place at start-up (`_create_schema`) by adding the `etag` column.
COLUMNS_0_4 = (
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
#: The table's columns, in order: a file whose table has others was written by another layout.
COLUMNS = (*COLUMNS_0_4, "etag")

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
    document TEXT NOT NULL,
    etag TEXT NOT NULL DEFAULT ''
)
"""

# Gives every row of a file written before ETags were kept a token of its own.
_UPGRADE = (
    "ALTER TABLE conversations ADD COLUMN etag TEXT NOT NULL DEFAULT ''",
    "UPDATE conversations SET etag = lower(hex(randomblob(12))) WHERE etag = ''",
)

_INDEXES = (
    # A user's conversations, newest first: listings and delete_all.
    "CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations (oid, updated_at)",
    # Lets the periodic purge find expired rows without scanning the table while holding the lock.
    "CREATE INDEX IF NOT EXISTS conversations_by_expiry ON conversations (expires_at)",
)

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

    The ETag of a stored conversation is a random token drawn anew by every write (96 bits, so
    no two writes of any process sharing the file draw the same).
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
        #: Only touched on the event loop, never across an await (see `decoded.py`).
        self._decoded = Decoded()
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
        """The live conversation under this key and its ETag, or None when missing or expired.

        The document is read and decoded only when the row's ETag is not the one held decoded.
        """
        key = conversation_key(oid, conversation_id)
        held = self._decoded.get(key)
        params = (held.etag if held is not None else "", key, self._clock())

        def work(db: sqlite3.Connection) -> tuple[str, str | None] | None:
            row: tuple[str, str | None] | None = db.execute(_GET, params).fetchone()
            return row

        row = await self._run(work)
        if row is None:
            return None
        etag, document = row
        if document is None and held is not None:  # the row still carries the held ETag
            return Stored(held.conversation, etag)
        conversation = from_document(pydantic_core.from_json(str(document)))
        self._decoded.remember(key, Held(etag, conversation, None))
        return Stored(conversation, etag)

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        """Store a new conversation and return its ETag; `VersionConflict` if a live one has its key,
        `QuotaFull` if its user already keeps `max_conversations` live ones.

        An expired conversation under the same key is replaced.
        """
        c, now, etag = conversation, self._clock(), _new_etag()
        turns, document = self._decoded.encode(c)
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
        refused = (c.key, now)
        counted = (c.oid, c.tid, now)

        def create(db: sqlite3.Connection) -> int:
            """0 when created, -1 when a live conversation has the key, else how many the user keeps."""
            if db.execute(_CREATE, params).rowcount:
                return 0
            if db.execute(_LIVE, refused).fetchone() is not None:
                return -1
            return max(int(db.execute(_COUNT, counted).fetchone()[0]), 1)

        def work(db: sqlite3.Connection) -> int:
            # Without a quota one statement decides; with one, telling a taken key from a full
            # quota takes a second look, inside the same transaction so both see one state.
            if quota < 0 or db.in_transaction:
                return create(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                outcome = create(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return outcome

        outcome = await self._write(Held(etag, c, turns), work, now)
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
        turns, document = self._decoded.encode(c)
        params = (*_columns(c), document, etag, c.key, if_match, now)

        def work(db: sqlite3.Connection) -> int:
            changed: int = db.execute(_REPLACE, params).rowcount
            return changed

        if not await self._write(Held(etag, c, turns), work, now):
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
            # Not needed to be right (no later row can carry a held ETag), only to free memory.
            self._decoded.forget(key)

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

        try:
            return await self._run(work)
        finally:
            self._decoded.forget_where(conversation_key(oid, ""))

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

    async def _write(self, held: Held, work: Callable[[sqlite3.Connection], int], now: float) -> int:
        """Run one conversation write of `held` (and the purge of expired rows when due);
        `work`'s result.

        `held` is remembered before the write as well as after it: a read waiting beside the
        write then finds the ETag it is about to see already decoded. Should the write not land,
        the entry names an ETag no row will ever carry, which costs the next read a decode.
        """
        key = held.conversation.key
        self._decoded.remember(key, held)
        if self._purge_due(now):

            def purging(db: sqlite3.Connection) -> int:
                outcome = work(db)
                db.execute(_PURGE, (now,))
                return outcome

            outcome = await self._run(purging, write=True)
        else:
            outcome = await self._run(work, write=True)
        # A read that ran just before the write may have put an older value in its place.
        self._decoded.remember(key, held)
        return outcome

    def _purge_due(self, now: float) -> bool:
        # Decided on the event loop, so `_next_purge` is only ever touched there.
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
    """The store's connection to the database at `path`, its folder and files private to this user.

    Raises `StartupError` naming the cause and the path: a folder or file that cannot be created
    or opened, a database another process keeps locked, a damaged file.
    """
    folder = path.parent
    files = (path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")))
    try:
        private_folder(folder)
    except OSError as error:
        raise StartupError(
            f"{describe(error, 'create the data folder', folder)}: {_ANOTHER_FOLDER}"
        ) from None
    warn_if_open(folder, *files)
    # SQLite gives its -wal and -shm files the database's mode; creating all three first, 0600
    # whatever the umask, does not rest on that, and shows a folder Anvil cannot write to as what
    # it is (SQLite would call it an unusable database).
    for file in files:
        try:
            private_file(file)
        except OSError as error:
            raise StartupError(
                f"the data folder {folder} is not writable ({describe(error, 'create', file)}): make it "
                f"writable by the user Anvil runs as, or {_ANOTHER_FOLDER}"
            ) from None
    # Asked, not tried: closing a descriptor of a file would drop the locks another connection of
    # this process holds on it (POSIX advisory locks belong to the process, not the descriptor).
    effective = os.access in os.supports_effective_ids
    for file in files:
        if not os.access(file, os.R_OK | os.W_OK, effective_ids=effective):
            raise StartupError(
                f"cannot open {file} to read and write it (permission denied): run Anvil as the user "
                "who owns it, or give that user read and write access to it"
            )
    try:
        return _open_database(path)
    except sqlite3.DatabaseError as error:
        raise StartupError(_database_problem(path, error)) from None


_ANOTHER_FOLDER = "set ANVIL_DATA_DIR to a folder Anvil can write to"


def _database_problem(path: Path, error: sqlite3.DatabaseError) -> str:
    """What SQLite's `error` opening `path` means, and what to do: only a file SQLite finds
    damaged (or that fails the integrity check) is sent to a backup."""
    said = " ".join(str(error).split())
    name = getattr(error, "sqlite_errorname", None) or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return (
            f"{path} stayed locked by another process for {BUSY_TIMEOUT:g} s ({said}): stop the "
            "process that holds it, or start again once it is done"
        )
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_IOERR", "SQLITE_FULL")):
        return (
            f"SQLite cannot read and write {path} ({said}): check that the data folder {path.parent} "
            "and its files are readable and writable by the user Anvil runs as, and that the disk has room"
        )
    return (
        f"{path} is not a usable SQLite database ({said}): restore it from a backup, or move it away "
        "to start with no conversations"
    )


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
        if columns == COLUMNS_0_4:
            for statement in _UPGRADE:
                db.execute(statement)
            columns = COLUMNS
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


def _new_etag() -> str:
    """A fresh ETag: 96 random bits, so no read made before any earlier write can match it."""
    return secrets.token_hex(12)
