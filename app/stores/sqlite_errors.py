"""What a failed SQLite call becomes: a passing rush (`Unavailable`, "busy"), or a failure the
operator must act on (`StoreFailed`, naming its cause and what to do), by SQLite's own error name."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.errors import StoreFailed, Unavailable


def unavailable_for(error: sqlite3.OperationalError, path: Path | None) -> Unavailable:
    """The error a caller gets for `error`, raised by the database at `path`."""
    name = getattr(error, "sqlite_errorname", "")
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        # Locked by another process beyond the busy timeout: a rush a retry gets past.
        return Unavailable("The conversation store is busy; retry shortly.", retry_after=1.0)
    where = path or "the database file"
    folder = "ANVIL_DATA_DIR" if path is None else f"{path.parent} (ANVIL_DATA_DIR)"
    message = "The conversation store cannot write; retry later."
    if name.startswith("SQLITE_FULL"):
        cause, remedy = "disk-full", f"free space on the disk that holds {folder}"
    elif name.startswith("SQLITE_READONLY"):
        cause, remedy = "read-only", f"let Anvil's user write {where} and {folder}"
    elif name.startswith(("SQLITE_IOERR", "SQLITE_CANTOPEN")):
        cause = "io-error"
        remedy = f"check the disk that holds {where} (SQLite said: {error}), or move ANVIL_DATA_DIR"
    else:
        cause, message = "database-error", "The conversation store failed; retry later."
        remedy = f"check {where}, which another program may have changed (SQLite said: {error})"
    return StoreFailed(message, cause=cause, remedy=remedy, retry_after=30.0)
