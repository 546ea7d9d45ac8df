"""JSON-RPC at the edges of `POST /mcp`, against a real server, in both eras: invalid JSON is one
short -32700, string and integer ids are answered as sent, messages that are not requests are
accepted where the era allows them, and HTTP-level refusals keep their answer whatever the body
(`app.mcp_server.spec_fixes`, entry 4). Batches, bodies that are not a message and invalid ids are
pinned in tests/regressions/."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.anvil_server import AnvilServer
from support.jsonrpc import MODERN, ask, assert_refused, envelope, fresh, headers, post, stored_turns


@pytest.mark.parametrize("version", [None, "2025-06-18", MODERN])
@pytest.mark.parametrize("body", [b"{not json", b"", b'{"jsonrpc":"2.0","id":1,', b"[" * 60_000, b"\xff"])
def test_invalid_json_is_32700(dev_server: AnvilServer, version: str | None, body: bytes) -> None:
    response = post(dev_server, body, headers(dev_server, version, method="tools/list"))
    assert_refused(response, -32700, "Parse error")


@pytest.mark.parametrize("version", [None, "2025-06-18", MODERN])
@pytest.mark.parametrize("request_id", ['"a string"', "0", "-3", "12345678901234567890123456789"])
def test_string_and_integer_ids_are_answered_with_the_same_id(
    dev_server: AnvilServer, version: str | None, request_id: str
) -> None:
    conversation = fresh()
    response = post(dev_server, ask(conversation, version, request_id), headers(dev_server, version))
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["id"] == json.loads(request_id) and reply["result"]["structuredContent"]["turn"] == 1
    assert stored_turns(dev_server, conversation) == 1


def posted_responses() -> list[dict[str, Any]]:
    return [
        {"jsonrpc": "2.0", "id": 4, "result": {}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
    ]


def test_messages_that_are_not_requests_are_still_accepted(dev_server: AnvilServer) -> None:
    """A notification, and in the handshake era a response a client posts (even an error
    response whose id is null, as JSON-RPC allows): 202, no body."""
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    for message in [notification, *posted_responses()]:
        response = post(dev_server, json.dumps(message).encode(), headers(dev_server, "2025-06-18"))
        assert response.status_code == 202 and response.content == b"", (message, response.text)
    modern = envelope("notifications/initialized")
    sent = headers(dev_server, MODERN, method="notifications/initialized")
    response = post(dev_server, modern.content, sent)
    assert response.status_code == 202 and response.content == b""


def test_a_posted_response_is_refused_in_2026_07_28(dev_server: AnvilServer) -> None:
    """Clients send no responses in 2026-07-28 (the server sends them no requests)."""
    for message in posted_responses():
        sent = headers(dev_server, MODERN, method="tools/list")
        response = post(dev_server, json.dumps(message).encode(), sent)
        assert_refused(response, -32600, "one JSON-RPC request or notification object")


@pytest.mark.parametrize("version", [None, "2025-03-26", MODERN])
def test_http_level_refusals_keep_their_answer(dev_server: AnvilServer, version: str | None) -> None:
    """The SDK refuses a request that does not accept JSON (406) or does not send JSON (400
    "Invalid Content-Type header", or 415 in the handshake era) before it reads the body: a
    batch there gets the answer a single request gets."""
    single = ask(fresh(), version)
    batch = json.dumps([json.loads(single)]).encode()
    changes = [{"Accept": "text/event-stream"}, {"Content-Type": "text/plain"}]
    if version != MODERN:
        changes.append({"Content-Type": "application/json-seq"})
    for changed in changes:
        sent = {**headers(dev_server, version), **changed}
        one, many = post(dev_server, single, sent), post(dev_server, batch, sent)
        assert one.status_code in (400, 406, 415) and (many.status_code, many.text) == (
            one.status_code,
            one.text,
        )
        assert "batch" not in many.text


def test_a_batch_with_an_unsupported_version_is_32022(dev_server: AnvilServer) -> None:
    """The version check comes first, as for any body."""
    batch = json.dumps([json.loads(ask(fresh(), None))]).encode()
    response = post(dev_server, batch, headers(dev_server, "2099-01-01"))
    assert response.status_code == 400 and response.json()["error"]["code"] == -32022
