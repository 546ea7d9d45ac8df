"""Which MCP requests are answered as an event stream: those that ask for progress."""

from __future__ import annotations

from typing import Any

from app.http.json_text import NotJson, decode


def wants_progress(accept: str, body: bytes, message: dict[str, Any] | None) -> bool:
    """Whether the POST is a request with `params._meta.progressToken` from a client that reads SSE.

    `message` is the body as `spec_fixes.checked_message` decoded it. It is None only for a
    request the SDK refuses from its headers before it reads the body (an `Accept` without
    JSON, say); its two request managers word that refusal differently, so the body is decoded
    here to choose between them as for any other request.
    """
    # Nearly every request has no token, and these two tests are the cheapest; the byte test
    # also keeps a key spelled with escapes (`progress\u0054oken`) from counting, as it never has.
    if b"progressToken" not in body or "text/event-stream" not in accept:
        return False
    if message is None:
        try:
            message = decode(body)
        except NotJson:
            return False
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return isinstance(token, str | int) and not isinstance(token, bool) and "id" in message
