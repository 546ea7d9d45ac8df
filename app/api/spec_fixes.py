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
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION, DiscoverResult, RequestParams
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from starlette.responses import Response
from starlette.types import Scope

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
        decoded = json.loads(body)
        if isinstance(decoded, dict):
            request_id = decoded.get("id")
    except ValueError:
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


def strip_header_whitespace(scope: Scope) -> None:
    """Entry 3: header values without surrounding spaces and tabs, for every layer after this."""
    scope["headers"] = [(name, value.strip(b" \t")) for name, value in scope["headers"]]
