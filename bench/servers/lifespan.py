"""The ASGI lifespan protocol for the framework-less benchmark servers: nothing to start or stop."""

from __future__ import annotations

from typing import Any


async def serve_lifespan(receive: Any, send: Any) -> None:
    """Acknowledge start-up and shutdown, returning once the server shuts down."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
