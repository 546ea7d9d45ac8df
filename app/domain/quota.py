"""How many conversations one user may keep: checked only when a new one would be created."""

from __future__ import annotations

from app.domain.ports import ConversationStore
from app.errors import QuotaExceeded


async def ensure_room(store: ConversationStore, oid: str, tid: str, limit: int | None) -> None:
    """Raise `QuotaExceeded` when the user already has `limit` live conversations in this tenant.

    An early refusal, before an answer is paid for. The limit itself is kept by the store, which
    counts and creates in one atomic step (`ConversationStore.create(max_conversations=...)`):
    two creations at the same moment may both pass this check, but never both the store's.
    """
    if limit is None:
        return
    kept = await store.count(oid, tid)
    if kept >= limit:
        raise quota_exceeded(kept, limit)


def quota_exceeded(kept: int, limit: int | None) -> QuotaExceeded:
    """The refusal of a conversation the user has no room for, saying what to do instead."""
    return QuotaExceeded(
        f"You keep {kept} conversations, the most one user may keep ({limit}): delete some with "
        "delete_conversation (list them with list_conversations), or ask one-shot without a "
        "conversationId. Your existing conversations keep working."
    )
