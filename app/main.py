"""The composition root: `create_app(settings)` builds the one ASGI application.

The adapters the settings name (store, answer engine, sign-in) are opened by its lifespan
(`app.lifespan`); the surfaces (`app.http`, `app.mcp_server`, `app.rest`) are assembled here.
Importing this module starts nothing and reads no environment variable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import State
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

import app
from app.http.guard import MCP_PATH, BodyGuard, RequestGuard
from app.http.head import serve_head
from app.http.problems import install_problem_handlers
from app.http.ratelimit import RateLimit
from app.http.signin import BearerAuthMiddleware
from app.http.wellknown import WELL_KNOWN, add_well_known_routes
from app.lifespan import StartupFailures, lifespan
from app.mcp_server.server import build_mcp_server, mcp_endpoint, name_the_knowledge, session_manager
from app.operations.operation import Described
from app.rest.openapi import build_openapi
from app.rest.routes import add_routes
from app.settings import Settings
from app.settings.telemetry import TelemetrySettings
from app.telemetry.http import RequestTelemetry
from app.telemetry.instruments import Telemetry
from app.telemetry.setup import start


class ServeMcp:
    """ASGI middleware, innermost: `POST /mcp` goes straight to the MCP endpoint, every other
    request on to the routes.

    Past the middlewares that check every request, an MCP request needs nothing of FastAPI's:
    not its exception handlers (the endpoint answers every error itself, and anything else is
    the 500 of `install_problem_handlers`' outer layer), nor its dependency exit stack or its
    route lookup, which cost 3 to 4 % of an MCP call's CPU. The `/mcp` route stays in the
    router, which answers `/mcp/` with its redirect and lists its methods.
    """

    def __init__(self, app: ASGIApp, *, endpoint: ASGIApp) -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == MCP_PATH:
            await self.endpoint(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def create_app(
    settings: Settings | None = None, *, start_telemetry: Callable[[TelemetrySettings], Telemetry] = start
) -> FastAPI:
    """Build Anvil for `settings` (read from the environment when omitted).

    Requests pass, outermost first: `RequestGuard` (Host, Origin, method, declared size),
    `BearerAuthMiddleware` (sign-in for `/mcp` and `/api/`), `BodyGuard` (the body within its
    size, read once and kept for what follows), then the routes: `/mcp` (the MCP endpoint) and
    the REST routes generated from the same operations.

    Telemetry starts from the environment (`app.telemetry.setup.start`, which records nothing
    without an exporter) unless another `start_telemetry` is given.
    """
    settings = settings or Settings()
    # Before the MCP server is built: with a tracer provider configured, it keeps the SDK's spans.
    telemetry = start_telemetry(settings)
    named = settings.knowledge_named()
    server = build_mcp_server(settings, spans=settings.mcp_spans, named=named)
    manager = session_manager(server, settings)
    streaming = session_manager(server, settings, streaming=True)

    state = State()
    api = FastAPI(
        title="Anvil",
        version=app.__version__,
        description=(
            "Sessionless MCP service with conversation history, answering questions from "
            f"{Described(settings, *named).knowledge_phrase}."
        ),
        lifespan=lifespan(
            settings,
            telemetry,
            (manager.run, streaming.run),
            state,
            opened=lambda runtime: name_the_knowledge(server, runtime, settings, named),
        ),
        docs_url=None,
        redoc_url=None,
        # FastAPI's own spans record `url.path` and `url.query`, which carry conversation ids and
        # search text; `RequestTelemetry` records the route template instead. Off, FastAPI also
        # skips looking for providers on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    add_routes(api, limits=settings, history=settings, named=named)
    add_well_known_routes(api)
    # An ASGI app as a route endpoint: any method reaches it (the guard answers 405 first).
    # `ServeMcp` hands it `/mcp` itself; the route is what the router redirects `/mcp/` to and
    # lists the methods of.
    endpoint = mcp_endpoint(manager, streaming)
    api.router.routes.insert(0, Route(MCP_PATH, endpoint, include_in_schema=False))
    serve_head(api.router.routes)
    # Added innermost first: header checks, then sign-in, then the body (so a caller without a
    # valid token is refused before it sends one).
    # The body's deadline is the front door's (`anvil serve`), which needs no timer per request.
    api.add_middleware(ServeMcp, endpoint=endpoint)
    api.add_middleware(BodyGuard, max_body_bytes=settings.max_body_bytes)
    if settings.rate_limit_per_minute:
        api.add_middleware(RateLimit, per_minute=settings.rate_limit_per_minute)
    api.add_middleware(BearerAuthMiddleware, resource_metadata_url=settings.base_url + WELL_KNOWN + "/mcp")
    api.add_middleware(
        RequestGuard,
        allowed_hosts=settings.host_patterns(),
        allowed_origins=settings.origin_patterns(),
        max_body_bytes=settings.max_body_bytes,
    )
    install_problem_handlers(api)
    # Outside the 500 handler, so a crash is seen with the status the client got.
    api.add_middleware(
        RequestTelemetry, telemetry=telemetry, access_log=settings.access_log, routes=api.router.routes
    )
    api.add_middleware(StartupFailures, state=state)

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = build_openapi(api, settings, base_url=settings.base_url)
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    return api
