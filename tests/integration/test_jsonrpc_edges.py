"""JSON-RPC at the edges of `POST /mcp`, against a real server, in both eras: a batch, an invalid
`id`, JSON that is not a message and invalid JSON each get one short JSON-RPC error with
`"id": null` and HTTP 400, and nothing is run (`app.mcp_server.spec_fixes`, entry 4)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from support.anvil_server import AnvilServer

ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
#: Every way of choosing the era: no header, each handshake revision, and 2026-07-28.
VERSIONS = [None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", MODERN]
#: Ids that are not a string or an integer, as they are written in the body.
BAD_IDS = ["null", "{}", "[]", "1.5", "1.0", "true", "false", "1e400", "-1e400", "2e3"]


_tokens: dict[str, str] = {}


def token(server: AnvilServer) -> str:
    """One token per server for every request here (minting signs with RSA)."""
    if server.url not in _tokens:
        _tokens[server.url] = server.token("edges")
    return _tokens[server.url]


def headers(
    server: AnvilServer, version: str | None, method: str = "tools/call", name: str = "ask"
) -> dict[str, str]:
    sent = {
        "Authorization": f"Bearer {token(server)}",
        "Accept": ACCEPT,
        "Content-Type": "application/json",
    }
    if version is not None:
        sent["MCP-Protocol-Version"] = version
    if version == MODERN:
        sent["Mcp-Method"] = method
        if method == "tools/call":
            sent["Mcp-Name"] = name
    return sent


def ask(conversation: str, version: str | None, request_id: str = "7") -> bytes:
    """A `tools/call` of `ask` on `conversation` with `request_id` written as is into the body."""
    params: dict[str, Any] = {"name": "ask", "arguments": {"question": "q", "conversationId": conversation}}
    if version == MODERN:
        params["_meta"] = MODERN_META
    return b'{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":%s}' % (
        request_id.encode(),
        json.dumps(params).encode(),
    )


def post(server: AnvilServer, body: bytes, sent: dict[str, str]) -> httpx.Response:
    return httpx.post(server.mcp_url, content=body, headers=sent, timeout=30)


def assert_refused(response: httpx.Response, code: int, *words: str) -> None:
    """One JSON-RPC error with `"id": null` and a short message naming `words`; no validation dump."""
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    reply = response.json()
    assert reply == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": code, "message": reply["error"]["message"]},
    }
    message = reply["error"]["message"]
    assert len(message) < 120 and len(response.content) < 300, message
    assert "validation error" not in message.lower() and "pydantic" not in message.lower(), message
    for word in words:
        assert word in message, message


def stored_turns(server: AnvilServer, conversation: str) -> int | None:
    """How many turns `conversation` holds, or None when it does not exist."""
    response = httpx.get(
        f"{server.url}/api/conversations/{conversation}",
        headers={"Authorization": f"Bearer {token(server)}"},
        timeout=30,
    )
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return len(response.json()["turns"])


def fresh() -> str:
    return f"edge-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_batch_is_one_clean_32600_and_runs_nothing(dev_server: AnvilServer, version: str | None) -> None:
    conversation = fresh()
    one = json.loads(ask(conversation, version, '"one"'))
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    for batch in ([one], [one, {**one, "id": "two"}, notification], [notification], []):
        response = post(dev_server, json.dumps(batch).encode(), headers(dev_server, version))
        assert_refused(response, -32600, "batches are not supported", "one JSON-RPC request per POST")
    assert stored_turns(dev_server, conversation) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_a_request_with_an_invalid_id_is_32600_with_a_null_id_and_runs_nothing(
    dev_server: AnvilServer, version: str | None
) -> None:
    conversation = fresh()
    for request_id in BAD_IDS:
        response = post(dev_server, ask(conversation, version, request_id), headers(dev_server, version))
        assert_refused(response, -32600, "id must be a string or an integer")
    assert stored_turns(dev_server, conversation) is None
    # The same request with a valid id runs: turn 1 is the first turn stored.
    response = post(dev_server, ask(conversation, version, "8"), headers(dev_server, version))
    assert response.json()["result"]["structuredContent"]["turn"] == 1
    assert stored_turns(dev_server, conversation) == 1


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_after_initialize_an_invalid_id_is_still_refused(dev_server: AnvilServer, version: str) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "edges", "version": "1"},
        },
    }
    agreed = post(dev_server, json.dumps(initialize).encode(), headers(dev_server, None))
    assert agreed.status_code == 200 and agreed.json()["result"]["protocolVersion"] == version
    conversation = fresh()
    for request_id in ("null", "1.5", "true"):
        response = post(dev_server, ask(conversation, version, request_id), headers(dev_server, version))
        assert_refused(response, -32600, "id")
    assert stored_turns(dev_server, conversation) is None


NOT_MESSAGES = {
    "an empty object": (b"{}", "one JSON-RPC request or notification object"),
    "a string": (b'"x"', "one JSON-RPC request or notification object"),
    "a number": (b"1", "one JSON-RPC request or notification object"),
    "null": (b"null", "one JSON-RPC request or notification object"),
    "only the version": (b'{"jsonrpc":"2.0"}', "one JSON-RPC request or notification object"),
    "an id and no method": (b'{"jsonrpc":"2.0","id":1}', "one JSON-RPC request or notification object"),
    "a response with a fractional id": (
        b'{"jsonrpc":"2.0","id":1.5,"result":{}}',
        "one JSON-RPC request or notification object",
    ),
    "no jsonrpc member": (b'{"id":1,"method":"tools/list"}', "jsonrpc"),
    "jsonrpc 1.0": (b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}', "jsonrpc"),
    "a method that is a number": (b'{"jsonrpc":"2.0","id":1,"method":5}', "method must be a string"),
    "params that are a list": (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}', "params"),
    "a notification with params that are a string": (
        b'{"jsonrpc":"2.0","method":"notifications/initialized","params":"x"}',
        "params",
    ),
}


@pytest.mark.parametrize("version", [None, "2025-03-26", "2025-11-25", MODERN])
@pytest.mark.parametrize("case", sorted(NOT_MESSAGES))
def test_json_that_is_not_a_message_is_32600(dev_server: AnvilServer, version: str | None, case: str) -> None:
    body, words = NOT_MESSAGES[case]
    response = post(dev_server, body, headers(dev_server, version, method="tools/list"))
    assert_refused(response, -32600, words)


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
    modern = {**notification, "params": {"_meta": MODERN_META}}
    sent = headers(dev_server, MODERN, method="notifications/initialized")
    response = post(dev_server, json.dumps(modern).encode(), sent)
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


@pytest.mark.parametrize("version", [None, MODERN])
def test_a_request_asking_for_progress_is_checked_too(dev_server: AnvilServer, version: str | None) -> None:
    """A request with a `progressToken` from a client that reads SSE goes to the SDK's streaming
    manager: with an invalid id it gets the same JSON error first, and is not run."""
    conversation = fresh()
    request = json.loads(ask(conversation, version))
    request["params"].setdefault("_meta", {})["progressToken"] = "p-1"
    for request_id in (None, 2.5, False):
        body = json.dumps({**request, "id": request_id}).encode()
        assert_refused(post(dev_server, body, headers(dev_server, version)), -32600, "id")
    assert stored_turns(dev_server, conversation) is None
    assert post(dev_server, json.dumps(request).encode(), headers(dev_server, version)).status_code == 200
    assert stored_turns(dev_server, conversation) == 1
