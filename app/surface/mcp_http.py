"""`POST /mcp`: the MCP endpoint, reached straight from the sign-in layer.

`tools/call` and `tools/list` — what editors send on every turn, in either protocol era — are
served as one exchange through the SDK's own request pipeline (`serve_one`), the one its
2026-07-28 entry uses, with the SDK's handlers, middleware, validation and result shapes:

- handshake era: instead of the per-request session the SDK builds for a stateless server (its
  own task group, streams and dispatcher);
- 2026-07-28: after the SDK's own envelope checks (`classify_inbound_request`), without the
  per-call walk of the tool's input schema for `Mcp-Param-*` headers when that schema declares
  none (the check then cannot fail) and without re-validating what is checked here.

Everything else, and every request that is not plainly shaped (a notification, a batch, an
unusual header, an envelope the SDK rejects), goes to the SDK's session manager untouched. A
test keeps both paths answering byte for byte alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import repeat
from typing import Any

import pydantic_core
from mcp.server._streamable_http_modern import _SingleExchangeDispatchContext
from mcp.server.connection import Connection
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import modern_error_data, serve_one
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
    x_mcp_header_map,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION, JSONRPCError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from app.api.guard import read_body, replay_body

#: Methods served as a single exchange; they need no session state.
SINGLE_EXCHANGE_METHODS = frozenset({"tools/call", "tools/list"})
_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_MCP_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
#: `json.dumps(..., separators=(",", ":"))`, as the SDK's 2026-07-28 entry encodes, made once.
_JSON = json.JSONEncoder(separators=(",", ":"))


class McpEndpoint:
    """ASGI app for `POST /mcp` (the guard has already refused other methods and oversized bodies)."""

    def __init__(self, server: MCPServer[Any], *, single_exchange: bool = True) -> None:
        self.server = server
        self.single_exchange = single_exchange
        # Tool name -> (its input schema, whether that schema declares any `x-mcp-header`).
        self._param_headers: dict[str, tuple[object, bool]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self.server.session_manager
        if not self.single_exchange:
            await manager.handle_request(scope, receive, send)
            return
        # Decoded once (starlette's Headers decodes every line again on each lookup); the first
        # of repeated lines wins, as it does for starlette and so for the SDK.
        pairs = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in scope["headers"]]
        folded = dict(reversed(pairs))
        version = folded.get("mcp-protocol-version")
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        body = await read_body(receive) or b""
        message = _single_exchange_message(folded, body)
        route = self._modern_route(pairs, folded, message) if modern and message else None
        if message is None or (modern and route is None):
            await manager.handle_request(scope, replay_body(body, receive), send)
            return
        request_id, method, params = message["id"], message["method"], message.get("params")
        if route is not None:
            connection = Connection.from_envelope(
                route.protocol_version, route.client_info, route.client_capabilities
            )
            progress_token = progress_token_from_params(params)
        else:
            connection = Connection.from_envelope(version or DEFAULT_NEGOTIATED_VERSION, None, None)
            progress_token = None
        context = _SingleExchangeDispatchContext(
            transport=TransportContext(
                kind="streamable-http", can_send_request=False, headers=Headers(scope=scope)
            ),
            request_id=request_id,
            message_metadata=ServerMessageMetadata(
                request_context=Request(scope, replay_body(body, receive))
            ),
            progress_token=progress_token,
        )
        error = None
        try:
            result = await serve_one(
                self.server._lowlevel_server,  # the SDK exposes no public handle to its kernel
                context,
                method,
                params,
                connection=connection,
                lifespan_state=manager._lifespan_state,
            )
        except Exception as exc:
            error = modern_error_data(exc)
        if route is None:
            # Handshake era: 200 whatever the outcome, as the SDK's session path answers.
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
            if error is None:
                reply["result"] = result
            else:
                reply["error"] = error.model_dump(mode="json", by_alias=True, exclude_none=True)
            # Encoded by pydantic-core as the SDK's session path encodes it: text stays UTF-8.
            await _send_json(send, 200, pydantic_core.to_json(reply))
            return
        # 2026-07-28: the error code decides the HTTP status; encoded as the SDK's entry encodes
        # it (the json module, non-ASCII escaped). A result is already JSON-ready, so the
        # envelope needs no model around it.
        if error is None:
            envelope: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": result}
            status = 200
        else:
            envelope = JSONRPCError(jsonrpc="2.0", id=request_id, error=error).model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
            status = ERROR_CODE_HTTP_STATUS.get(error.code, 200)
        await _send_json(send, status, _JSON.encode(envelope).encode())

    def _modern_route(
        self, pairs: list[tuple[str, str]], folded: dict[str, str], message: Mapping[str, Any]
    ) -> InboundModernRoute | None:
        """The SDK's verdict on a 2026-07-28 envelope, or None when the SDK must answer it itself.

        None for a duplicated routing header, an envelope the SDK rejects (its own error then
        goes out), any `Mcp-Param-*` header, and a tool whose schema declares such headers.
        """
        if any(map(str.startswith, folded, repeat(_MCP_PARAM_PREFIX))):
            return None
        # A repeated routing header needs a repeated name (ASGI names are lower case).
        if len(folded) < len(pairs) and find_duplicated_routing_header(pairs):
            return None
        verdict = classify_inbound_request(message, headers=folded)
        if not isinstance(verdict, InboundModernRoute):
            return None
        if message["method"] == "tools/call" and self._declares_param_headers(message.get("params") or {}):
            return None
        return verdict

    def _declares_param_headers(self, params: Mapping[str, Any]) -> bool:
        name = params.get("name")
        if not isinstance(name, str):
            return False
        lookup = self.server._lowlevel_server.get_tool_input_schema
        schema = lookup(name) if lookup is not None else None
        known = self._param_headers.get(name)
        if known is None or known[0] is not schema:
            known = (schema, bool(x_mcp_header_map(schema)))
            self._param_headers[name] = known
        return known[1]


def _single_exchange_message(headers: Mapping[str, str], body: bytes) -> dict[str, Any] | None:
    """The decoded request when the POST is a plain JSON request for a single-exchange method."""
    if not headers.get("content-type", "").lower().startswith("application/json"):
        return None
    accept = [part.split(";")[0].strip().lower() for part in headers.get("accept", "").split(",")]
    if not any(kind in ("application/json", "application/*", "*/*") for kind in accept):
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(message, dict)
        or message.get("jsonrpc") != "2.0"
        or not message.keys() <= _ENVELOPE_KEYS
    ):
        return None
    request_id, params = message.get("id"), message.get("params")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None
    if message.get("method") not in SINGLE_EXCHANGE_METHODS or not (
        params is None or isinstance(params, dict)
    ):
        return None
    return message


async def _send_json(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
