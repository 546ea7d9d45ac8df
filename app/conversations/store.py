"""The port every conversation store implements (memory, SQLite, Cosmos DB).

Stores keep whole `Conversation` values under `conversation_key(oid, conversationId)` and
apply writes optimistically: `create` fails if a live conversation already has the key, and
`replace` fails unless the stored `version` is still the one the caller read. Expired
conversations behave exactly as missing ones. Stores know nothing of users' rights: the
service checks `tid` and decides what to load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.conversations.model import Conversation


class VersionConflict(Exception):
    """Another writer got there first: re-read and re-apply."""


class InvalidCursor(ValueError):
    """A listing cursor this store did not issue (or that no longer parses)."""


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """What a listing shows of one conversation, without its turns."""

    conversation_id: str
    title: str | None
    turns: int
    updated_at: float
    expires_at: float

    @classmethod
    def of(cls, conversation: Conversation) -> ConversationSummary:
        return cls(
            conversation.conversation_id,
            conversation.title,
            conversation.turn_count,
            conversation.updated_at,
            conversation.expires_at,
        )


@dataclass(frozen=True, slots=True)
class ConversationPage:
    """One page of a listing and the opaque cursor of the next (None on the last page)."""

    items: tuple[ConversationSummary, ...]
    next_cursor: str | None


class ConversationStore(Protocol):
    """Where conversations live. Every implementation passes `tests/contract`."""

    async def get(self, oid: str, conversation_id: str) -> Conversation | None:
        """The live conversation under this key, or None when missing or expired."""
        ...

    async def create(self, conversation: Conversation) -> None:
        """Store a new conversation; `VersionConflict` if a live one already has its key.

        An expired conversation under the same key is replaced.
        """
        ...

    async def replace(self, conversation: Conversation, expected_version: int) -> None:
        """Overwrite the stored conversation if its version is still `expected_version`.

        Raises `VersionConflict` when the stored version differs or the conversation is gone.
        """
        ...

    async def delete(self, oid: str, conversation_id: str) -> bool:
        """Remove a conversation; True if a live one was removed."""
        ...

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        """The user's live conversations in tenant `tid`, newest `updatedAt` first (ties: by conversationId).

        At most `limit` items per page; `cursor` (from a previous page) continues the listing.
        Raises `InvalidCursor` for a cursor this store did not issue.
        """
        ...

    async def delete_all(self, oid: str, tid: str) -> int:
        """Remove every conversation of the user in tenant `tid`; returns how many live ones were removed."""
        ...

    async def check(self) -> None:
        """Raise if the store cannot serve requests (used by `/readyz`)."""
        ...

    async def aclose(self) -> None:
        """Release connections and files."""
        ...
