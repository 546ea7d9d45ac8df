"""Where the MCP SDK's answer differs from the specification, the answer the specification gives.

Each entry names the clause it restores, and `tests/unit/test_spec_fixes.py` holds a test per
entry that runs the bare SDK and fails once the SDK answers as the specification says: then the
entry can go.

1. `server/discover` lists every revision served (MCP 2026-07-28, "Version negotiation": a
   server that serves several revisions on one endpoint lists them all in `supportedVersions`);
   the SDK lists only 2026-07-28, although the same endpoint negotiates every handshake revision.
2. An unsupported `MCP-Protocol-Version` gets JSON-RPC error -32022 with
   `data.supported` naming every revision served (MCP 2026-07-28, "Protocol version header":
   unsupported version error); the SDK names only 2026-07-28, and for a request that looks
   handshake-era it answers -32602 instead.
3. Header field values are compared without surrounding whitespace (RFC 9110 section 5.5:
   "a field value does not include leading or trailing whitespace"); the HTTP parser keeps it,
   and the SDK compares the routing headers (`MCP-Protocol-Version`, `Mcp-Method`,
   `Mcp-Name`) exactly, refusing `Mcp-Method: tools/call ` (with a trailing space).
4. A POST body that is not one JSON-RPC message gets one JSON-RPC error with `"id": null`
   (JSON-RPC 2.0 section 5: the id is null when it could not be detected, "e.g. Parse
   error/Invalid Request"), HTTP 400, and nothing is run: -32700 for invalid JSON, -32600 for
   anything else. The SDK's handshake-era transport answers valid JSON that is not a message
   with -32602 and a pydantic validation dump of 2 KB, and takes a request whose `id` is not a
   string or an integer for a notification (its notification model ignores the `id` member):
   202, the request is never run and never answered. What counts as invalid:
   - an `id` that is null, an object, an array, a boolean, or a number with a fraction or an
     exponent (`1.5`, `1.0`, `1e400`). JSON-RPC 2.0 section 4 allows "a String, Number, or NULL"
     but says numbers "SHOULD NOT contain fractional parts" and null is discouraged; MCP
     ("Requests", every revision) narrows it: "Requests MUST include a string or integer ID" and
     "Unlike base JSON-RPC, the ID MUST NOT be null". That is also the SDK's own `RequestId`
     (a strict integer or a string), so what passes here the SDK accepts;
   - a batch (a JSON array). Only the 2025-03-26 revision has batches ("Batching": servers "MUST
     support receiving JSON-RPC batches"); 2025-06-18 removed them and no later revision has
     them. Anvil refuses them in every revision, with a message that says to send one request
     per POST, rather than answering them: the SDK's transport reads one message per POST and
     has no public way to answer several, and a batch would run many calls under one HTTP
     request's rate-limit and concurrency slot;
   - any other JSON value that is not a request, a notification or (in the handshake era) a
     response: not an object, no `"jsonrpc": "2.0"`, a `method` that is not a string, `params`
     that are not an object.
   The 2026-07-28 path of the SDK already answers these with a clean -32600; the same check
   runs there too, so that both eras word it alike. A request the SDK refuses before it reads
   the body (an `Accept` without JSON: 406; a `Content-Type` other than JSON: 400 or 415)
   keeps that answer.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    DiscoverResult,
    RequestParams,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, KNOWN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.responses import Response

from app.http.json_text import NotJson, decode
from app.http.received import RequestHead

#: Every protocol revision Anvil serves on `POST /mcp`, oldest first.
SERVED_VERSIONS: tuple[str, ...] = tuple(KNOWN_PROTOCOL_VERSIONS)


def install(server: Server[Any]) -> None:
    """Apply the fixes that live in the MCP server (entry 1)."""

    async def discover(ctx: ServerRequestContext[Any], params: RequestParams | None) -> DiscoverResult:
        return DiscoverResult(
            supported_versions=list(SERVED_VERSIONS),
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )

    # The SDK documents replacing its default `server/discover` handler this way.
    server.add_request_handler("server/discover", RequestParams, discover)


def unsupported_version(requested: str, body: bytes) -> Response:
    """Entry 2: the -32022 answer to an `MCP-Protocol-Version` Anvil does not serve."""
    request_id = None
    try:
        decoded = decode(body)
        if isinstance(decoded, dict):
            request_id = decoded.get("id")
    except NotJson:
        pass
    error = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {
            "code": UNSUPPORTED_PROTOCOL_VERSION,
            "message": f"Unsupported protocol version {requested!r}; use one of the supported versions.",
            "data": {"supported": list(SERVED_VERSIONS), "requested": requested},
        },
    }
    return Response(json.dumps(error), status_code=400, media_type="application/json")


BATCH = "Invalid Request: batches are not supported; send one JSON-RPC request per POST."
BAD_ID = "Invalid Request: the id must be a string or an integer."
NOT_A_MESSAGE = "Invalid Request: the body must be one JSON-RPC request or notification object."
BAD_VERSION = "Invalid Request: the jsonrpc member must be the string 2.0."
BAD_METHOD = "Invalid Request: the method must be a string."
BAD_PARAMS = "Invalid Request: params must be an object."


def checked_message(head: RequestHead, body: bytes) -> Response | dict[str, Any] | None:
    """Entry 4: the answer to a `POST /mcp` body that is not one JSON-RPC message; else the
    decoded message, which the endpoint hands on rather than parse the body again; None when
    the SDK refuses the request from its headers before it reads the body (its answer stays).

    The SDK's transport still parses the body itself (see `McpEndpoint`): this is the one parse
    of Anvil's own. A micro-benchmark (best of 9 runs of 50,000 on a shared 2-core machine) put
    the check at about 5 µs for a 314-byte `tools/call` of `ask`, 1.5 µs of it the parse.
    """
    modern = head.protocol_version is not None and head.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS
    if not accepts_json(head.accept) or not sends_json(head.content_type, modern):
        return None
    try:
        # One decoder for both eras and REST (`app.http.json_text`): the SDK's own parsers differ
        # by era (pydantic-core, the json module), and a body one refused the other took.
        decoded = decode(body)
    except NotJson as error:
        return refusal(PARSE_ERROR, f"Parse error: {error}")
    problem = _problem(decoded, modern)
    if problem is not None:
        return refusal(INVALID_REQUEST, problem)
    message: dict[str, Any] = decoded
    return message


def refusal(code: int, message: str) -> Response:
    """One JSON-RPC error with `"id": null`, as the SDK's handshake-era transport words its own."""
    error = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return Response(json.dumps(error, separators=(",", ":")), status_code=400, media_type="application/json")


_JSON_KINDS = frozenset({"application/json", "application/*", "*/*"})


def accepts_json(accept: str) -> bool:
    """Whether the SDK reads the body of a POST with this `Accept` (its `check_accept_headers`,
    which wants a `Request`); else it answers 406."""
    return any(kind.split(";", 1)[0].strip().lower() in _JSON_KINDS for kind in accept.split(","))


def sends_json(content_type: str, modern: bool) -> bool:
    """Whether the SDK reads the body of a POST with this `Content-Type`: its transport security
    check in both eras (else 400, "Invalid Content-Type header"), and in the handshake era its
    transport's own (else 415)."""
    if content_type == "application/json":
        return True
    if not content_type.lower().startswith("application/json"):
        return False
    return modern or any(part.strip() == "application/json" for part in content_type.split(";")[0].split(","))


def _problem(decoded: Any, modern: bool) -> str | None:
    """What makes `decoded` not one JSON-RPC message Anvil takes, or None."""
    if isinstance(decoded, list):
        return BATCH
    if not isinstance(decoded, dict):
        return NOT_A_MESSAGE
    if "method" in decoded:
        # A request or a notification: the rules of the SDK's `JSONRPCRequest` and
        # `JSONRPCNotification`, checked here without building the models.
        if "id" in decoded and not _valid_id(decoded["id"]):
            return BAD_ID
        if decoded.get("jsonrpc") != "2.0":
            return BAD_VERSION
        if not isinstance(decoded["method"], str):
            return BAD_METHOD
        params = decoded.get("params")
        if params is not None and not isinstance(params, dict):
            return BAD_PARAMS
        return None
    # No method: a response a client posts. The handshake era lets a client post one (the SDK
    # answers 202), so the SDK's own models judge it; 2026-07-28 has nothing to answer (clients
    # "MUST NOT" post responses there; the SDK refuses them with -32600 too).
    if modern:
        return NOT_A_MESSAGE
    try:
        jsonrpc_message_adapter.validate_python(decoded, by_name=False)
    except ValidationError:
        return NOT_A_MESSAGE
    return None


def _valid_id(value: object) -> bool:
    """A string or an integer (not a boolean, which Python counts as one); see entry 4."""
    return type(value) is int or isinstance(value, str)
