"""The JSON-RPC envelope a client of each protocol revision posts to `/mcp`, built once for every
test (a test that sends a wrong one on purpose changes what is built here); raw bodies posted to
a real server in either era, and the one short error a body Anvil refuses gets."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from support.anvil_server import AnvilServer

ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"
#: The era of the handshake, as most tests speak it.
LEGACY = "2025-06-18"
#: Every way of choosing the era: no header, each handshake revision, and 2026-07-28.
VERSIONS = [None, "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", MODERN]
#: The methods whose request names what it acts on, and the `params` member that names it: in
#: 2026-07-28 its value is repeated in the `Mcp-Name` header.
NAMED_BY = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def _modern_meta() -> dict[str, Any]:
    """What `params._meta` of every 2026-07-28 request carries: the revision and the client's
    capabilities (none)."""
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }


@dataclass(frozen=True)
class Envelope:
    """A JSON-RPC message and the HTTP headers it is posted with (all but the token)."""

    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def content(self) -> bytes:
        """The body as JSON, ASCII only: an unpaired surrogate is sent escaped (`json=` cannot)."""
        return json.dumps(self.body).encode()


def envelope(
    method: str,
    params: Mapping[str, Any] | None = None,
    *,
    version: str | None = MODERN,
    request_id: int | str = 1,
    meta: Mapping[str, Any] | None = None,
) -> Envelope:
    """`method` with `params` as a client of protocol `version` sends it (None: no version
    header, as a handshake-era client may).

    In 2026-07-28 that is the `MCP-Protocol-Version`, `Mcp-Method` and (for a method in
    `NAMED_BY`) `Mcp-Name` headers, and `params._meta` naming the revision and the client's
    capabilities; in the handshake era the version header alone. `meta` is added to
    `params._meta` (a `progressToken`, or a wrong revision on purpose). A `notifications/`
    method gets no id.
    """
    body: dict[str, Any] = {"jsonrpc": "2.0"}
    if not method.startswith("notifications/"):
        body["id"] = request_id
    body["method"] = method
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    sent = dict(params or {})
    sent_meta = {**(_modern_meta() if version == MODERN else {}), **(meta or {})}
    if version == MODERN:
        headers["Mcp-Method"] = method
        named = sent.get(NAMED_BY.get(method, ""))
        if isinstance(named, str):
            headers["Mcp-Name"] = named
    if sent_meta:
        sent["_meta"] = sent_meta
    if sent:
        body["params"] = sent
    return Envelope(body, headers)


def mcp_call(
    server: AnvilServer,
    name: str,
    arguments: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    version: str = LEGACY,
    request_id: int = 1,
    meta: Mapping[str, Any] | None = None,
    url: str | None = None,
) -> httpx.Response:
    """A stateless `tools/call` of `name` in `version`'s framing, with `headers` (a token) added."""
    params = {"name": name, "arguments": arguments}
    call = envelope("tools/call", params, version=version, request_id=request_id, meta=meta)
    return httpx.post(url or server.mcp_url, json=call.body, headers={**call.headers, **headers}, timeout=30)


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a 200 answer, in order: its JSON document, or each event of its
    stream."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return [response.json()]
    assert response.headers["content-type"].startswith("text/event-stream")
    return [
        json.loads(line.removeprefix("data:").strip())
        for line in response.text.splitlines()
        if line.startswith("data:") and line.removeprefix("data:").strip()
    ]


_tokens: dict[str, str] = {}


def token(server: AnvilServer) -> str:
    """One token per server for every request (minting signs with RSA)."""
    if server.url not in _tokens:
        _tokens[server.url] = server.token("edges")
    return _tokens[server.url]


def headers(
    server: AnvilServer, version: str | None, method: str = "tools/call", name: str = "ask"
) -> dict[str, str]:
    """The headers of `method` (a call of the tool `name`) in `version`'s era, with a token."""
    sent = envelope(method, {"name": name}, version=version).headers
    return {"Authorization": f"Bearer {token(server)}", **sent}


def ask(conversation: str, version: str | None, request_id: str = "7") -> bytes:
    """A `tools/call` of `ask` on `conversation` with `request_id` written as is into the body
    (an id JSON cannot carry back as it was written, such as `1e400`, included)."""
    arguments = {"question": "q", "conversationId": conversation}
    body = envelope("tools/call", {"name": "ask", "arguments": arguments}, version=version).body
    del body["id"]
    return b'{"id":%s,%s' % (request_id.encode(), json.dumps(body).encode().removeprefix(b"{"))


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
