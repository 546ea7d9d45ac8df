"""Listing cursors: exact positions, and every string of the published shape is one to continue from."""

from __future__ import annotations

import re

import pytest

from app.domain.conversation import ConversationSummary
from app.domain.ports import InvalidCursor
from app.stores.cursor import CURSOR_PATTERN, MAX_CURSOR_CHARS, comes_after, decode_cursor, encode_cursor


def summary(updated_at: float, conversation_id: str = "plan-2026") -> ConversationSummary:
    return ConversationSummary(conversation_id, None, 1, updated_at, updated_at + 60)


@pytest.mark.parametrize("updated_at", [1767225600.123456, 0.0, 1e-99, 9.999999999999999e99, 1 / 3])
def test_a_cursor_reads_back_as_the_exact_position_and_has_the_published_shape(updated_at: float) -> None:
    cursor = encode_cursor(summary(updated_at))
    assert decode_cursor(cursor) == (updated_at, "plan-2026")
    assert re.fullmatch(CURSOR_PATTERN, cursor)
    assert len(cursor) <= MAX_CURSOR_CHARS


def test_the_exponent_is_written_without_a_plus_that_a_query_string_would_turn_into_a_space() -> None:
    cursor = encode_cursor(summary(1e20))
    assert "+" not in cursor
    assert decode_cursor(cursor) == (1e20, "plan-2026")


@pytest.mark.parametrize("cursor", ["", "~plan", "1.5", "1.5~", "abc~plan", "1.5e+20~plan", "1.5~has space"])
def test_a_string_of_another_shape_is_an_invalid_cursor(cursor: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(cursor)


def test_after_means_older_or_as_old_with_a_later_id() -> None:
    position = (100.0, "m")
    assert comes_after(summary(99.0, "a"), position)
    assert comes_after(summary(100.0, "n"), position)
    assert not comes_after(summary(100.0, "m"), position)
    assert not comes_after(summary(100.0, "a"), position)
    assert not comes_after(summary(101.0, "z"), position)
