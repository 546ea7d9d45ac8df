"""Raw JSON-RPC bodies posted to a real server's `/mcp` in either era, and the one short error a
body Anvil refuses gets."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from support.anvil_server import AnvilServer

ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
#: Every way of choosing the era: no header, each handshake revision, and 2026-07-28.
VERSIONS = [None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", MODERN]

_tokens: dict[str, str] = {}


def token(server: AnvilServer) -> str:
    """One token per server for every request (minting signs with RSA)."""
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
