"""Listing cursors for stores that page by (updatedAt, conversationId).

A cursor is the last listed conversation's `updated_at`, as Python writes the float (the
shortest text that reads back as the same float, so the position is exact), then `~`, then its
conversation id: `1767225600.123456~plan-2026`. Its shape, `app.domain.cursor.CURSOR_PATTERN`,
is published in the OpenAPI document and the MCP `inputSchema`, and every string of that shape is
a position a listing can continue from, so a client, or a gateway validating against the
document, can check a cursor by its shape alone and the server never refuses one the document
allows.
"""

from __future__ import annotations

import re

from app.domain.conversation import ConversationSummary
from app.domain.cursor import CURSOR_PATTERN, MAX_CURSOR_CHARS
from app.domain.ports import InvalidCursor

__all__ = ["CURSOR_PATTERN", "MAX_CURSOR_CHARS", "comes_after", "decode_cursor", "encode_cursor"]

_CURSOR = re.compile(CURSOR_PATTERN)


def encode_cursor(last: ConversationSummary) -> str:
    """A cursor that continues a listing after `last`."""
    return f"{last.updated_at!r}".replace("e+", "e") + "~" + last.conversation_id


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (updatedAt, conversationId) a cursor continues after; `InvalidCursor` if it is not
    of the cursor's shape."""
    if _CURSOR.fullmatch(cursor) is None:
        raise InvalidCursor("cursor is not one this server issued")
    updated_at, _, conversation_id = cursor.partition("~")
    return float(updated_at), conversation_id


def comes_after(summary: ConversationSummary, position: tuple[float, str]) -> bool:
    """Whether `summary` sorts after `position` in newest-first order."""
    updated_at, conversation_id = position
    return summary.updated_at < updated_at or (
        summary.updated_at == updated_at and summary.conversation_id > conversation_id
    )
