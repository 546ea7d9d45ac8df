"""A body with a UTF-8 byte-order mark, or encoded as UTF-16, was answered in the 2026-07-28 era
and refused (-32700) in 2025-06-18, though docs/mcp.md says the eras read a body alike; `NaN` was
taken as JSON; `POST /api/conversations` with a body of whitespace started a conversation (201).
Fixed in 0.6.0: one decoder (`app.http.json_text`) for both eras and the REST API, RFC 8259 only."""

from __future__ import annotations

import codecs
import json

import httpx
import pytest
from support.anvil_server import AnvilServer
from support.jsonrpc import LEGACY, envelope

QUESTION = {"question": "What is Anvil?"}


def bearer(server: AnvilServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token('mallory')}"}


def bodies() -> dict[str, bytes]:
    text = json.dumps(envelope("tools/call", {"name": "ask", "arguments": QUESTION}).body)
    return {
        "a byte-order mark": codecs.BOM_UTF8 + text.encode(),
        "UTF-16": text.encode("utf-16"),
        "NaN": text.replace('"What is Anvil?"', "NaN").encode(),
    }


@pytest.mark.parametrize("version", [LEGACY, "2026-07-28"])
@pytest.mark.parametrize("kind", ["a byte-order mark", "UTF-16", "NaN"])
def test_each_era_refuses_the_same_bodies_the_same_way(
    dev_server: AnvilServer, version: str, kind: str
) -> None:
    call = envelope("tools/call", {"name": "ask", "arguments": QUESTION}, version=version)
    response = httpx.post(
        dev_server.mcp_url, content=bodies()[kind], headers={**call.headers, **bearer(dev_server)}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32700 and error["message"].startswith("Parse error: ")
    said = {"a byte-order mark": "byte-order mark", "UTF-16": "not UTF-8", "NaN": "NaN is not a JSON value"}
    assert said[kind] in error["message"]


@pytest.mark.parametrize(
    ("body", "told"),
    [
        (codecs.BOM_UTF8 + b'{"question": "Hi?"}', "byte-order mark"),
        ('{"question": "Hi?"}'.encode("utf-16"), "not UTF-8"),
        (b'{"question": "Hi?", "conversationId": NaN}', "NaN is not a JSON value"),
        (b"   \n", "Expecting value"),
    ],
)
def test_rest_refuses_them_with_a_problem_document(dev_server: AnvilServer, body: bytes, told: str) -> None:
    for path in ("/api/ask", "/api/conversations"):
        response = httpx.post(
            f"{dev_server.url}{path}",
            content=body,
            headers={**bearer(dev_server), "Content-Type": "application/json"},
        )
        assert response.status_code == 400, (path, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert told in response.json()["detail"]


def test_no_body_at_all_is_still_no_arguments(dev_server: AnvilServer) -> None:
    started = httpx.post(f"{dev_server.url}/api/conversations", headers=bearer(dev_server))
    assert started.status_code == 201


def test_a_body_nested_too_deep_with_a_version_not_served_is_still_32022(dev_server: AnvilServer) -> None:
    call = envelope("tools/call", {"name": "ask", "arguments": QUESTION}, version="2099-01-01")
    response = httpx.post(
        dev_server.mcp_url, content=b"[" * 20_000, headers={**call.headers, **bearer(dev_server)}
    )
    assert response.status_code == 400, response.text  # was a 500: the nesting escaped the decoder
    assert response.json()["error"]["code"] == -32022
