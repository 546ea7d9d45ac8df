"""Which MCP requests are answered as an event stream: those that ask for progress."""

from __future__ import annotations

import json

from starlette.datastructures import Headers
from starlette.types import Scope


def wants_progress(scope: Scope, body: bytes) -> bool:
    """Whether the POST is a request with `params._meta.progressToken` from a client that reads SSE."""
    # The body test first: nearly every request has no token, and it is the cheaper one.
    if b"progressToken" not in body or "text/event-stream" not in Headers(scope=scope).get("accept", ""):
        return False
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return isinstance(token, str | int) and not isinstance(token, bool) and "id" in message
