"""A sink for telemetry in benchmarks: answers every OTLP export (`/v1/...`) with an empty 200,
as a collector does, and anything else (the harness's readiness probe) with `{}`."""

from __future__ import annotations

from typing import Any

from servers.lifespan import serve_lifespan


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
        return
    while (await receive()).get("more_body"):
        pass
    export = scope["path"].startswith("/v1/")
    kind = b"application/x-protobuf" if export else b"application/json"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": b"" if export else b"{}"})
