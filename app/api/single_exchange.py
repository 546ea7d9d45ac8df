"""The fast path for handshake-era `tools/call` and `tools/list` (`ANVIL_MCP_SINGLE_EXCHANGE`).

For a stateless server, the SDK's handshake-era transport builds a session per POST: a task in
its task group, memory streams, a JSON-RPC dispatcher and a transport to tear down. A plain
`tools/call` or `tools/list` needs none of that, so it is served here through the SDK's own
single-exchange pipeline (`serve_one`, the same one its 2026-07-28 entry uses) with the SDK's
handlers, middleware, validation and result shapes, and answered as the SDK's stateless path
answers it. Everything else, and any request that is not plainly shaped, goes to `fallback`
(the SDK's request manager) untouched. Tests keep both answering byte for byte alike.

Only public SDK names are used; `RequestContext` implements the SDK's public
`DispatchContext` protocol for one HTTP request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.runner import modern_error_data, serve_one
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.message import MessageMetadata, ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION, RequestId
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.guard import read_body, replay_body

#: Methods served as a single exchange; they need no session state.
METHODS = frozenset({"tools/call", "tools/list"})
_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
#: Anvil's MCP server keeps no state of its own across requests (the runtime travels in the
#: ASGI lifespan state), so its SDK lifespan state is the SDK default: an empty mapping.
_NO_LIFESPAN_STATE: dict[str, Any] = {}


@dataclass
class RequestContext:
    """The SDK's `DispatchContext` for one handshake-era HTTP request: no back-channel (a
    stateless server cannot reach the client) and nowhere for notifications to go (the
    response is one JSON document)."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: MessageMetadata
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = False

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        return None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


class SingleExchange:
    """ASGI app: serves a plain handshake-era `tools/call`/`tools/list` itself, else `fallback`."""

    def __init__(self, server: Server[Any], *, fallback: ASGIApp) -> None:
        self.server = server
        self.fallback = fallback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self.fallback(scope, receive, send)  # 2026-07-28: the SDK serves one exchange itself
            return
        body = await read_body(receive) or b""
        message = plain_request(headers, body)
        if message is None:
            await self.fallback(scope, replay_body(body, receive), send)
            return
        request_id = message["id"]
        context = RequestContext(
            transport=TransportContext(kind="streamable-http", can_send_request=False, headers=headers),
            request_id=request_id,
            message_metadata=ServerMessageMetadata(
                request_context=Request(scope, replay_body(body, receive))
            ),
        )
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        try:
            reply["result"] = await serve_one(
                self.server,
                context,
                message["method"],
                message.get("params"),
                connection=Connection.from_envelope(version or DEFAULT_NEGOTIATED_VERSION, None, None),
                lifespan_state=_NO_LIFESPAN_STATE,
            )
        except Exception as error:  # mapped to a JSON-RPC error as the SDK maps it
            reply["error"] = modern_error_data(error).model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
        # 200 whatever the outcome, encoded by pydantic-core (text stays UTF-8), as the SDK's
        # stateless path answers.
        encoded = pydantic_core.to_json(reply)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(encoded)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": encoded})


def plain_request(headers: Headers, body: bytes) -> dict[str, Any] | None:
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
    if message.get("method") not in METHODS or not (params is None or isinstance(params, dict)):
        return None
    return message
