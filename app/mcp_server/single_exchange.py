"""The fast path for `tools/call` and `tools/list` (`ANVIL_MCP_SINGLE_EXCHANGE`).

Editors send these on every turn. A plain one is served here through the SDK's own
single-exchange pipeline (`serve_one`, which its 2026-07-28 entry uses too) with the SDK's
handlers, middleware, validation and result shapes, and answered as the SDK answers it:

- handshake era: without the session the SDK's stateless transport builds per POST (a task in
  its task group, memory streams, a JSON-RPC dispatcher, a transport to tear down);
- 2026-07-28: after the SDK's own envelope checks (`classify_inbound_request`), without the
  walk of the tool's input schema for `Mcp-Param-*` headers when it declares none, and without
  validating the envelope and the reply through models a second time.

A request that asks for progress (a `progressToken` from a client that reads SSE) goes to
`streaming`, the SDK's streaming request manager. Everything else, and any request that is not
plainly shaped (a notification, an `Mcp-Param-*` header, a repeated routing header, an envelope
the SDK rejects), goes to `fallback`, the SDK's request manager, untouched. In Anvil a body that
is not one JSON-RPC message (a batch, an invalid `id`) never gets here: `app.mcp_server.server.McpEndpoint`
answers it (`app.mcp_server.spec_fixes` entry 4) and hands this module the body it decoded. Tests keep
both paths answering byte for byte alike, and the whole suite also runs with this module
switched off.

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
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
    x_mcp_header_map,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import MessageMetadata, ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION, ProgressToken, RequestId
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.http.guard import read_body, replay_body
from app.mcp_server.progress import wants_progress
from app.mcp_server.spec_fixes import accepts_json, sends_json

#: Methods served as a single exchange; they need no session state.
METHODS = frozenset({"tools/call", "tools/list"})
_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
#: Anvil's MCP server keeps no state of its own across requests (the runtime travels in the
#: ASGI lifespan state), so its SDK lifespan state is the SDK default: an empty mapping.
_NO_LIFESPAN_STATE: dict[str, Any] = {}
_MCP_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
#: `json.dumps(..., separators=(",", ":"))` as the SDK calls it, without building an encoder per
#: call (3.8 µs against 4.5 µs for an `ask` reply).
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))


@dataclass
class RequestContext:
    """The SDK's `DispatchContext` for one handshake-era HTTP request: no back-channel (a
    stateless server cannot reach the client) and nowhere for notifications to go (the
    response is one JSON document)."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: MessageMetadata
    progress_token: ProgressToken | None = None
    can_send_request: bool = False
    _cancel_requested: anyio.Event | None = field(default=None, init=False, repr=False)

    @property
    def cancel_requested(self) -> anyio.Event:
        """Never set (nothing can cancel a stateless request), so made only if a handler asks:
        an anyio Event costs about 1 µs to make, on every call otherwise."""
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

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
    """ASGI app: serves a plain `tools/call` or `tools/list` itself, anything else via `fallback`."""

    def __init__(self, server: Server[Any], *, fallback: ASGIApp, streaming: ASGIApp | None = None) -> None:
        self.server = server
        self.fallback = fallback
        #: Where a request that asks for progress goes (the SDK's streaming manager).
        self.streaming = streaming
        # Tool name -> whether its input schema declares `x-mcp-header`s (then the SDK must check
        # the `Mcp-Param-*` headers). Tools are fixed when the server is built.
        self._declares_param_headers: dict[str, bool] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_body(receive) or b""
        if self.streaming is not None and wants_progress(scope, body):
            await self.streaming(scope, replay_body(body, receive), send)
            return
        await self.answer(scope, receive, send, body)

    async def answer(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, decoded: Any = None
    ) -> None:
        """Answer the POST whose `body` was already read from `receive`; `decoded` is that body
        parsed, when the caller has parsed it (None: parse it here if need be)."""
        headers = Headers(scope=scope)
        version = headers.get("mcp-protocol-version")
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        if modern and _unusual_modern_headers(scope["headers"]):
            await self.fallback(scope, replay_body(body, receive), send)
            return
        message = plain_request(headers, body, decoded)
        route = self._modern_route(headers, message) if modern and message else None
        if message is None or (modern and route is None):
            await self.fallback(scope, replay_body(body, receive), send)
            return
        request_id, params = message["id"], message.get("params")
        if route is not None:
            connection = Connection.from_envelope(
                route.protocol_version, route.client_info, route.client_capabilities
            )
            progress_token = progress_token_from_params(params)
        else:
            connection = Connection.from_envelope(version or DEFAULT_NEGOTIATED_VERSION, None, None)
            progress_token = None
        context = RequestContext(
            transport=TransportContext(kind="streamable-http", can_send_request=False, headers=headers),
            request_id=request_id,
            message_metadata=ServerMessageMetadata(
                request_context=Request(scope, replay_body(body, receive))
            ),
            progress_token=progress_token,
        )
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        status = 200
        try:
            reply["result"] = await serve_one(
                self.server,
                context,
                message["method"],
                params,
                connection=connection,
                lifespan_state=_NO_LIFESPAN_STATE,
            )
        except Exception as error:  # mapped to a JSON-RPC error as the SDK maps it
            data = modern_error_data(error)
            reply["error"] = data.model_dump(mode="json", by_alias=True, exclude_none=True)
            if route is not None:
                status = ERROR_CODE_HTTP_STATUS.get(data.code, 200)
        # Encoded as the SDK's path for the era encodes it: pydantic-core for the handshake era
        # (text stays UTF-8, and always 200), the json module for 2026-07-28.
        encoded = pydantic_core.to_json(reply) if route is None else _COMPACT_JSON.encode(reply).encode()
        length = str(len(encoded)).encode()
        response_headers = [(b"content-type", b"application/json"), (b"content-length", length)]
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": encoded})

    def _modern_route(self, headers: Headers, message: dict[str, Any]) -> InboundModernRoute | None:
        """The SDK's verdict on a 2026-07-28 envelope, or None when the SDK must answer it itself
        (an envelope it rejects, or a call of a tool that declares `x-mcp-header`s)."""
        verdict = classify_inbound_request(message, headers=dict(headers.items()))
        if not isinstance(verdict, InboundModernRoute):
            return None
        if message["method"] == "tools/call" and self._param_headers(
            (message.get("params") or {}).get("name")
        ):
            return None
        return verdict

    def _param_headers(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        known = self._declares_param_headers.get(name)
        if known is None:
            lookup = self.server.get_tool_input_schema
            schema = lookup(name) if lookup is not None else None
            known = self._declares_param_headers[name] = bool(schema and x_mcp_header_map(schema))
        return known


def _unusual_modern_headers(raw: list[tuple[bytes, bytes]]) -> bool:
    """Headers the SDK must see itself: any `Mcp-Param-*`, or a routing header given twice."""
    names = [name.decode("latin-1") for name, _ in raw]
    if any(name.startswith(_MCP_PARAM_PREFIX) for name in names):
        return True
    if len(set(names)) == len(names):
        return False
    return (
        find_duplicated_routing_header([(n.decode("latin-1"), v.decode("latin-1")) for n, v in raw])
        is not None
    )


def plain_request(headers: Headers, body: bytes, decoded: Any = None) -> dict[str, Any] | None:
    """The decoded request when the POST is a plain JSON request for a single-exchange method
    (`decoded`: the body already parsed, or None to parse it here)."""
    version = headers.get("mcp-protocol-version")
    modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
    # Only what the SDK would read the body of: it refuses the rest (400, 406 or 415) itself.
    if not sends_json(headers.get("content-type", ""), modern) or not accepts_json(headers.get("accept", "")):
        return None
    message = decoded
    if message is None:
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
