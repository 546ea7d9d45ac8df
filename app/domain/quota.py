"""How many conversations one user may keep: checked only when a new one would be created."""

from __future__ import annotations

from app.errors import QuotaExceeded
from app.ports import ConversationStore

#: The default of `ANVIL_MAX_CONVERSATIONS_PER_USER`.
DEFAULT_MAX_CONVERSATIONS = 1000


async def ensure_room(store: ConversationStore, oid: str, tid: str, limit: int | None) -> None:
    """Raise `QuotaExceeded` when the user already has `limit` live conversations in this tenant.

    Existing conversations are never refused: only the creation of one more. Two creations at
    the same moment may both pass, so the limit can be exceeded by the few created at once.
    """
    if limit is None:
        return
    kept = await store.count(oid, tid)
    if kept >= limit:
        raise QuotaExceeded(
            f"You keep {kept} conversations, the most one user may keep ({limit}): delete some with "
            "delete_conversation (list them with list_conversations), or ask one-shot without a "
            "conversationId. Your existing conversations keep working."
        )
