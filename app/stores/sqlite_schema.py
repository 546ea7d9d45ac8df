"""Opening the SQLite store's file: a private folder and files, the schema, the 0.3/0.4 upgrade
and the integrity check, each refusal one line that says what to do."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from app.private_files import describe, private_file, private_folder, warn_if_open

#: Seconds a statement waits for another process's write lock before giving up.
BUSY_TIMEOUT = 5.0
#: A store starting waits for a lock this many busy timeouts in all: processes opening one file
#: at once each take it to create the schema, and SQLite may also answer "locked" at once (while
#: another sets up the write-ahead log) rather than wait. A start can wait longer than a request.
START_WAITS = 6
#: Seconds between two tries of a start refused at once.
_RETRY_PAUSE = 0.1

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

_ANOTHER_FOLDER = "set ANVIL_DATA_DIR to a folder Anvil can write to"


class StartupError(RuntimeError):
    """The store cannot start; the message says why in one line, and what to do."""


def connect(path: Path, busy_timeout: float = BUSY_TIMEOUT) -> sqlite3.Connection:
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
        return _open_waiting(path, busy_timeout)
    except sqlite3.DatabaseError as error:
        raise StartupError(_database_problem(path, error, START_WAITS * busy_timeout)) from None


def _open_waiting(path: Path, busy_timeout: float) -> sqlite3.Connection:
    """`_open_database`, tried again while the file is locked, for `START_WAITS` busy timeouts."""
    deadline = time.monotonic() + START_WAITS * busy_timeout
    while True:
        try:
            return _open_database(path, busy_timeout)
        except sqlite3.OperationalError as error:
            name = getattr(error, "sqlite_errorname", None) or ""
            if not name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or time.monotonic() >= deadline:
                raise
        time.sleep(_RETRY_PAUSE)  # a pause before trying the lock again, not a wait for an event


def _database_problem(path: Path, error: sqlite3.DatabaseError, busy_timeout: float) -> str:
    """What SQLite's `error` opening `path` means, and what to do: only a file SQLite finds
    damaged (or that fails the integrity check) is sent to a backup."""
    said = " ".join(str(error).split())
    name = getattr(error, "sqlite_errorname", None) or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return (
            f"{path} stayed locked by another process for {busy_timeout:g} s ({said}): stop the "
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


def _open_database(path: Path, busy_timeout: float) -> sqlite3.Connection:
    # isolation_level=None: autocommit, so each single-statement write commits at once and never
    # holds the write lock between calls. check_same_thread=False: the store keeps its calls on
    # one thread of its own, and the connection may be opened on another.
    connection = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
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


def write_header(db: sqlite3.Connection) -> None:
    """Commit a transaction that rewrites the database header with the value it holds: whether the
    file can be written (a full disk or a read-only file refuses it), leaving every row as it was."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(f"PRAGMA user_version = {int(version)}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
