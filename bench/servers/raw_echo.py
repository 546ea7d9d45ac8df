"""(A) The physical-limit reference: a raw ASGI JSON-RPC echo with no framework at all."""

from __future__ import annotations

import json
from typing import Any

from servers.lifespan import serve_lifespan

HEADERS = [(b"content-type", b"application/json")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    request = json.loads(body)
    text = request["params"]["arguments"]["question"]
    reply = {
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {"content": [{"type": "text", "text": text}], "isError": False},
    }
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": json.dumps(reply).encode()})
