"""What a conversation keeps and what one caller may ask (`HistorySettings`): the bounds the
domain enforces and the operations state in their descriptions and schemas."""

from __future__ import annotations

from pydantic import Field

from app.settings.base import Part

#: The most ANVIL_MAX_QUESTION_CHARS may be: the longest text argument any configuration accepts.
MAX_TEXT_CHARS = 32_000


class HistorySettings(Part):
    """How many turns and bytes a conversation keeps and how long, how long a question may be,
    and how many conversations one user may keep."""

    history_max_turns: int = Field(
        50, ge=1, le=1000, description="Turns kept per conversation; older turns are dropped."
    )
    history_max_bytes: int = Field(
        262_144,
        ge=4096,
        le=1_048_576,
        description="Bytes of questions and answers kept per conversation; older turns are dropped.",
    )
    history_ttl_seconds: int = Field(
        2_592_000, ge=60, description="A conversation expires this many seconds after its last turn."
    )
    max_question_chars: int = Field(
        8000, ge=1, le=MAX_TEXT_CHARS, description="Longest `question` accepted, in characters."
    )
    max_conversations_per_user: int = Field(
        1000,
        ge=1,
        le=10_000_000,
        description="Live conversations one user may keep in a tenant; creating one more is refused (409).",
    )
