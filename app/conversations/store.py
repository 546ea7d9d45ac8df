"""The port every conversation store implements (memory, SQLite, Cosmos DB).

Stores keep whole `Conversation` values under `conversation_key(oid, conversationId)` and
apply writes optimistically: `create` fails if a live conversation already has the key, and
`replace` fails unless the stored `version` is still the one the caller read. Expired
conversations behave exactly as missing ones. Stores know nothing of users' rights: the
service checks `tid` and decides what to load.
"""

from __future__ import annotations

from typing import Protocol

from app.conversations.model import Conversation


class VersionConflict(Exception):
    """Another writer got there first: re-read and re-apply."""


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

    async def check(self) -> None:
        """Raise if the store cannot serve requests (used by `/readyz`)."""
        ...

    async def aclose(self) -> None:
        """Release connections and files."""
        ...
