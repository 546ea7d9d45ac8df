"""Opaque listing cursors for stores that page by (updatedAt, conversationId)."""

from __future__ import annotations

import base64
import json

from app.domain.conversation import ConversationSummary
from app.ports import InvalidCursor


def encode_cursor(last: ConversationSummary) -> str:
    """A cursor that continues a listing after `last`."""
    raw = json.dumps([last.updated_at, last.conversation_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (updatedAt, conversationId) a cursor continues after; `InvalidCursor` if it is not ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated_at, conversation_id = json.loads(raw)
        if isinstance(updated_at, bool) or not isinstance(updated_at, int | float):
            raise TypeError
        if not isinstance(conversation_id, str):
            raise TypeError
    except (ValueError, TypeError) as error:
        raise InvalidCursor("cursor is not one this server issued") from error
    return float(updated_at), conversation_id


def comes_after(summary: ConversationSummary, position: tuple[float, str]) -> bool:
    """Whether `summary` sorts after `position` in newest-first order."""
    updated_at, conversation_id = position
    return summary.updated_at < updated_at or (
        summary.updated_at == updated_at and summary.conversation_id > conversation_id
    )
