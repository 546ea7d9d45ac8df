"""Reading a store in tests without minding the ETag, and what the SQLite store's tests share:
a clock moved by hand, conversations to store, another process's view of the file."""

from __future__ import annotations

import dataclasses
import sqlite3
from contextlib import closing
from pathlib import Path

from app.domain.conversation import Conversation, Turn
from app.domain.ports import ConversationStore, Stored

TTL = 3600.0


async def read(store: ConversationStore, oid: str, conversation_id: str) -> Conversation | None:
    """The stored conversation alone (its ETag checked to be a non-empty string), or None."""
    stored = await store.get(oid, conversation_id)
    if stored is None:
        return None
    assert isinstance(stored.etag, str) and stored.etag
    return stored.conversation


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
    """A conversation of `oid-1` in `tenant-1` with `version` turns, made now."""
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
