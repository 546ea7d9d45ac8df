"""Reading a store in tests without minding the ETag."""

from __future__ import annotations

from app.domain.conversation import Conversation
from app.domain.ports import ConversationStore


async def read(store: ConversationStore, oid: str, conversation_id: str) -> Conversation | None:
    """The stored conversation alone (its ETag checked to be a non-empty string), or None."""
    stored = await store.get(oid, conversation_id)
    if stored is None:
        return None
    assert isinstance(stored.etag, str) and stored.etag
    return stored.conversation
