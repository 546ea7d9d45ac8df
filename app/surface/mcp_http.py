"""`POST /mcp`: the MCP endpoint, reached straight from the sign-in layer.

2026-07-28 requests, and everything unusual, go to the SDK's stateless session manager. A
handshake-era `tools/call` or `tools/list` — what VS Code and most editors send on every turn —
is served as one exchange through the same SDK request pipeline (`serve_one`) that 2026-07-28
requests use, instead of the SDK's per-request session with its own task group and streams:
the handler, middleware, validation and result shape are the SDK's own, and a test keeps both
paths answering byte for byte alike.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server._streamable_http_modern import _SingleExchangeDispatchContext
from mcp.server.connection import Connection
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import modern_error_data, serve_one
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from app.surface.guard import read_body, replay_body

#: Handshake-era methods served as a single exchange; they need no session state.
SINGLE_EXCHANGE_METHODS = frozenset({"tools/call", "tools/list"})
_JSON_HEADERS = [(b"content-type", b"application/json")]


class McpEndpoint:
    """ASGI app for `POST /mcp` (the guard has already refused other methods and oversized bodies)."""

    def __init__(self, server: MCPServer[Any], *, single_exchange: bool = True) -> None:
        self.server = server
        self.single_exchange = single_exchange

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self.server.session_manager
        headers = Headers(scope=scope)
        version = headers.get("mcp-protocol-version")
        if not self.single_exchange or (version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS):
            await manager.handle_request(scope, receive, send)
            return
        body = await read_body(receive) or b""
        request = _single_exchange_request(headers, body)
        if request is None:
            await manager.handle_request(scope, replay_body(body, receive), send)
            return
        request_id, method, params = request
        connection = Connection.from_envelope(version or DEFAULT_NEGOTIATED_VERSION, None, None)
        context = _SingleExchangeDispatchContext(
            transport=TransportContext(kind="streamable-http", can_send_request=False, headers=headers),
            request_id=request_id,
            message_metadata=ServerMessageMetadata(
                request_context=Request(scope, replay_body(body, receive))
            ),
        )
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        try:
            reply["result"] = await serve_one(
                self.server._lowlevel_server,  # the SDK exposes no public handle to its kernel
                context,
                method,
                params,
                connection=connection,
                lifespan_state=manager._lifespan_state,
            )
        except Exception as error:
            reply["error"] = modern_error_data(error).model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
        payload = json.dumps(reply, separators=(",", ":")).encode()
        await send({"type": "http.response.start", "status": 200, "headers": _JSON_HEADERS})
        await send({"type": "http.response.body", "body": payload})


def _single_exchange_request(
    headers: Headers, body: bytes
) -> tuple[str | int, str, dict[str, Any] | None] | None:
    """(id, method, params) when the POST is a plain JSON request for a single-exchange method."""
    if not headers.get("content-type", "").lower().startswith("application/json"):
        return None
    accept = [part.split(";")[0].strip().lower() for part in headers.get("accept", "").split(",")]
    if not any(kind in ("application/json", "application/*", "*/*") for kind in accept):
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    request_id, method, params = message.get("id"), message.get("method"), message.get("params")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    if method not in SINGLE_EXCHANGE_METHODS or not (params is None or isinstance(params, dict)):
        return None
    return request_id, method, params
