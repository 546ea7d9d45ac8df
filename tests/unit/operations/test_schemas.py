"""The argument models: every rule a caller must follow is in the schema the surfaces publish."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.domain.conversation import ConversationSummary
from app.domain.cursor import CURSOR_PATTERN, MAX_CURSOR_CHARS
from app.operations.schemas import (
    NOT_BLANK,
    QUESTION_LENGTH,
    AskInput,
    ListInput,
    SearchInput,
    arguments_schema,
    configured_length,
)
from app.settings import Settings
from app.stores.cursor import encode_cursor


def test_a_configured_length_is_the_published_max_length(tmp_path: Path) -> None:
    schema = arguments_schema(AskInput, Settings(max_question_chars=1234, data_dir=tmp_path))
    properties = schema["properties"]
    assert properties["question"]["maxLength"] == 1234
    (text,) = [v for v in properties["instructions"]["anyOf"] if v.get("type") == "string"]
    assert text["maxLength"] == 1234
    assert (
        arguments_schema(SearchInput, Settings(max_question_chars=99, data_dir=tmp_path))["properties"][
            "searchText"
        ]["maxLength"]
        == 99
    )
    assert configured_length(AskInput, "question") == QUESTION_LENGTH
    assert QUESTION_LENGTH.environment_variable == "ANVIL_MAX_QUESTION_CHARS"
    assert configured_length(AskInput, "conversationId") is None


def test_arguments_go_by_their_wire_names_and_nothing_else_is_taken(tmp_path: Path) -> None:
    schema = arguments_schema(AskInput, Settings(data_dir=tmp_path))
    assert set(schema["properties"]) == {"question", "conversationId", "instructions", "clientRequestId"}
    assert schema["additionalProperties"] is False
    with pytest.raises(ValidationError, match="extra_forbidden"):
        AskInput.model_validate({"question": "q", "conversation_id": "c"})


@pytest.mark.parametrize("text", ["", " ", "\t\u3000\x1c"])
def test_blank_text_breaks_the_published_pattern(text: str) -> None:
    assert re.search(NOT_BLANK, text) is None
    with pytest.raises(ValidationError):
        AskInput.model_validate({"question": text})


def test_the_cursor_argument_publishes_the_shape_the_stores_write(tmp_path: Path) -> None:
    cursor = arguments_schema(ListInput, Settings(data_dir=tmp_path))["properties"]["cursor"]
    (text,) = [v for v in cursor["anyOf"] if v.get("type") == "string"]
    assert (text["pattern"], text["maxLength"]) == (CURSOR_PATTERN, MAX_CURSOR_CHARS)
    written = encode_cursor(ConversationSummary("plan-2026", None, 1, 1767225600.123456, 1767229200.0))
    assert ListInput.model_validate({"cursor": written}).cursor == written
