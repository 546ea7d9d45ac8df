"""Arguments are checked in one place, `Operation.parse`: the model's rules, and each length that
is a setting against the value configured. The services behind it check nothing again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.domain.conversation import CONVERSATION_ID_PATTERN
from app.errors import InvalidInput
from app.operations.catalog import OPERATIONS
from app.operations.operation import Operation
from app.operations.schemas import MAX_FETCH_CHARS, MAX_SEARCH_RESULTS
from app.settings import Settings

BY_NAME = {operation.name: operation for operation in OPERATIONS}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(max_question_chars=100, data_dir=tmp_path)


def refusal(operation: Operation[Any, Any], arguments: dict[str, Any], settings: Settings) -> str:
    with pytest.raises(InvalidInput) as refused:
        operation.parse(arguments, settings)
    return refused.value.message


@pytest.mark.parametrize("conversation_id", ["", "a b", "x" * 65, "a/b", "ü", "a:b", "a\n"])
@pytest.mark.parametrize("operation", ["ask", "get_conversation", "delete_conversation"])
def test_an_invalid_conversation_id_is_refused_naming_the_rule(
    settings: Settings, operation: str, conversation_id: str
) -> None:
    arguments = {"conversationId": conversation_id} | ({"question": "Hi?"} if operation == "ask" else {})
    assert CONVERSATION_ID_PATTERN == "^[A-Za-z0-9._-]{1,64}$"
    assert "^[A-Za-z0-9._-]{1,64}$" in refusal(BY_NAME[operation], arguments, settings)


@pytest.mark.parametrize("conversation_id", ["a", "A.b_c-9", "x" * 64])
def test_conversation_ids_at_the_edges_of_the_rule_are_taken(
    settings: Settings, conversation_id: str
) -> None:
    parsed = BY_NAME["ask"].parse({"question": "Hi?", "conversationId": conversation_id}, settings)
    assert parsed.conversation_id == conversation_id


@pytest.mark.parametrize("client_request_id", ["", "a b", "x" * 65, "a/b"])
def test_an_invalid_client_request_id_is_refused(settings: Settings, client_request_id: str) -> None:
    arguments = {"question": "Hi?", "conversationId": "c", "clientRequestId": client_request_id}
    assert "clientRequestId" in refusal(BY_NAME["ask"], arguments, settings)


@pytest.mark.parametrize(("operation", "field"), [("ask", "question"), ("search", "searchText")])
@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_blank_text_is_refused(settings: Settings, operation: str, field: str, text: str) -> None:
    message = refusal(BY_NAME[operation], {field: text}, settings)
    assert field in message
    assert "empty" in message or "at least 1 character" in message


@pytest.mark.parametrize(
    ("operation", "arguments", "field"),
    [
        ("ask", {"question": "x"}, "question"),
        ("ask", {"question": "q", "instructions": "x"}, "instructions"),
        ("search", {"searchText": "x"}, "searchText"),
        ("start_conversation", {"instructions": "x"}, "instructions"),
    ],
)
def test_text_longer_than_its_setting_is_refused_naming_both_lengths(
    settings: Settings, operation: str, arguments: dict[str, Any], field: str
) -> None:
    at_limit = {k: v * 100 if k == field else v for k, v in arguments.items()}
    assert BY_NAME[operation].parse(at_limit, settings) is not None
    over = {k: v * 101 if k == field else v for k, v in arguments.items()}
    message = refusal(BY_NAME[operation], over, settings)
    assert f"{field} is 101 characters long" in message
    assert "the 100 that ANVIL_MAX_QUESTION_CHARS allows" in message


@pytest.mark.parametrize("max_results", [0, MAX_SEARCH_RESULTS + 1, -1])
def test_search_refuses_max_results_out_of_range(settings: Settings, max_results: int) -> None:
    assert "maxResults" in refusal(
        BY_NAME["search"], {"searchText": "a", "maxResults": max_results}, settings
    )


@pytest.mark.parametrize("max_chars", [99, 0, MAX_FETCH_CHARS + 1])
def test_fetch_refuses_max_chars_out_of_range(settings: Settings, max_chars: int) -> None:
    assert "maxChars" in refusal(BY_NAME["fetch"], {"source": "a.md", "maxChars": max_chars}, settings)


def test_search_asks_for_five_results_unless_told(settings: Settings) -> None:
    assert BY_NAME["search"].parse({"searchText": "anvil"}, settings).max_results == 5


@pytest.mark.parametrize(
    ("operation", "arguments", "field"),
    [
        ("list_conversations", {"limit": 0}, "limit"),
        ("list_conversations", {"limit": 101}, "limit"),
        ("get_conversation", {"conversationId": "c", "limit": 0}, "limit"),
        ("start_conversation", {"title": "x" * 201}, "title"),
        ("start_conversation", {"title": "  "}, "title"),
    ],
)
def test_bounds_of_the_conversation_operations_are_named(
    settings: Settings, operation: str, arguments: dict[str, Any], field: str
) -> None:
    assert field in refusal(BY_NAME[operation], arguments, settings)
