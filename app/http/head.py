"""HEAD wherever a route serves GET (RFC 9110, 9.3.2)."""

from __future__ import annotations

from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadersOnly:
    """ASGI app: a GET route's own handler, answering HEAD with the status and headers the GET
    gets (`Content-Length` included) and no body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app(scope, receive, without_body)


def serve_head(routes: list[BaseRoute]) -> None:
    """Serve HEAD wherever a route serves GET (RFC 9110, 9.3.2): the probes, the sign-in
    metadata, the REST reads. FastAPI's routes serve only the methods they name (Starlette's
    own, such as `/openapi.json`, already add HEAD), so each gets a HEAD route beside it, left
    out of the OpenAPI document as HEAD is implied by GET."""
    for route in list(routes):
        if isinstance(route, APIRoute) and (route.methods or set()) & {"GET", "HEAD"} == {"GET"}:
            routes.append(
                Route(route.path, HeadersOnly(route.app), methods=["HEAD"], include_in_schema=False)
            )
