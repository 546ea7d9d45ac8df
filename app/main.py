"""The composition root: `create_app(settings)` builds the one ASGI application.

It chooses the adapters the settings name (store, answer engine, sign-in), opens them in the
one lifespan, and hands them to the surfaces through the lifespan state. Importing this module
starts nothing and reads no environment variable.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.datastructures import State
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import app
from app.auth.setup import open_auth, protected_resource_metadata
from app.domain.ask import AskService, HistoryLimits
from app.domain.lifecycle import ConversationService
from app.domain.ports import AnswerEngine, ConversationStore
from app.domain.turn_queue import TurnQueue
from app.http.guard import MCP_PATH, BodyGuard, RequestGuard
from app.http.problems import install_problem_handlers
from app.http.ratelimit import RateLimit
from app.http.signin import BearerAuthMiddleware
from app.lifespan import Runtime
from app.mcp_server.server import build_mcp_server, mcp_endpoint, session_manager
from app.rest.routes import WELL_KNOWN, add_routes, build_openapi
from app.settings import Settings
from app.telemetry.http import RequestTelemetry
from app.telemetry.setup import Telemetry, TracedEngine, TracedStore
from app.telemetry.setup import start as start_telemetry

logger = logging.getLogger(__name__)


async def open_store(settings: Settings) -> ConversationStore:
    """The configured conversation store, opened."""
    if settings.store == "memory":
        from app.stores.memory import MemoryStore

        return MemoryStore()
    if settings.store == "cosmos":
        from app.stores.cosmos import CosmosStore

        return await CosmosStore.open(settings)
    from app.stores.sqlite import SqliteStore

    return await SqliteStore.open(settings.data_dir / "conversations.sqlite3")


async def open_engine(settings: Settings, stack: AsyncExitStack) -> tuple[AnswerEngine, int | None]:
    """The configured answer engine, and how many documents its corpus holds (None for echo,
    which reads none); the corpus index is built off the event loop.

    The language-model engines answer from the same index as the embedded one.
    """
    if settings.answer_engine == "echo":
        from app.adapters.engines.echo import EchoEngine

        return EchoEngine(), None
    from app.adapters.engines.retrieval import RetrievalEngine

    corpus = settings.corpus_path()
    if not corpus.is_dir():
        raise RuntimeError(f"ANVIL_CORPUS_DIR: {corpus} is not a folder of Markdown files")
    retrieval = await anyio.to_thread.run_sync(RetrievalEngine.build, corpus)
    if settings.answer_engine == "retrieval":
        return retrieval, retrieval.document_count
    from app.adapters.engines.chat import open_chat_engine

    engine = open_chat_engine(settings, retrieval)
    stack.push_async_callback(engine.aclose)
    return engine, retrieval.document_count


async def open_runtime(
    settings: Settings, stack: AsyncExitStack, telemetry: Telemetry | None = None
) -> Runtime:
    """Open the store, the answer engine and sign-in; `stack` closes them again. With
    `telemetry`, the store and the engine are traced."""
    store: ConversationStore = await open_store(settings)
    stack.push_async_callback(store.aclose)
    engine, corpus_documents = await open_engine(settings, stack)
    if telemetry is not None:
        store = TracedStore(store, telemetry, settings.store)
        model = settings.openai_model if settings.answer_engine == "openai" else None
        if settings.answer_engine == "azure-openai":
            model = settings.azure_openai_deployment
        engine = TracedEngine(engine, telemetry, model)
    auth = await open_auth(settings)
    if auth.aclose is not None:
        stack.push_async_callback(auth.aclose)
    readiness: dict[str, Callable[[], Awaitable[None]]] = {"store": store.check}
    if auth.readiness is not None:
        readiness["signing-keys"] = auth.readiness
    # One queue of writers for both services: a delete makes the writers forget the conversation.
    writers = TurnQueue()
    return Runtime(
        settings=settings,
        service=AskService(
            store,
            engine,
            limits=HistoryLimits(
                max_turns=settings.history_max_turns,
                max_bytes=settings.history_max_bytes,
                ttl_seconds=settings.history_ttl_seconds,
            ),
            max_question_chars=settings.max_question_chars,
            max_conversations=settings.max_conversations_per_user,
            writers=writers,
        ),
        conversations=ConversationService(
            store,
            ttl_seconds=settings.history_ttl_seconds,
            max_instructions_chars=settings.max_question_chars,
            max_conversations=settings.max_conversations_per_user,
            writers=writers,
        ),
        verifier=auth.verifier,
        corpus_documents=corpus_documents,
        resource_metadata=protected_resource_metadata(settings, auth) if auth.verifier is not None else None,
        readiness=readiness,
        telemetry=telemetry,
    )


class StartupFailures:
    """ASGI middleware: a failed start-up is reported to the server as one line naming the cause
    (`Anvil cannot start: ...`) instead of the traceback Starlette sends."""

    def __init__(self, app: ASGIApp, *, state: State) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def report(message: Message) -> None:
            cause = getattr(self.state, "startup_failure", None)
            if message["type"] == "lifespan.startup.failed" and cause:
                message = {**message, "message": f"Anvil cannot start: {cause}"}
            await send(message)

        await self.app(scope, receive, report)


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


def create_app(settings: Settings | None = None, *, telemetry: Telemetry | None = None) -> FastAPI:
    """Build Anvil for `settings` (read from the environment when omitted).

    Requests pass, outermost first: `RequestGuard` (Host, Origin, method, declared size),
    `BearerAuthMiddleware` (sign-in for `/mcp` and `/api/`), `BodyGuard` (the body within its
    size, the protocol version), then the routes: `/mcp` (the MCP endpoint) and the
    REST routes generated from the same operations.

    Telemetry starts from the environment (`app.telemetry.setup.start`) unless `telemetry` is given.
    """
    settings = settings or Settings()
    # Before the MCP server is built: with a tracer provider configured, it keeps the SDK's spans.
    telemetry = telemetry or start_telemetry(settings)
    server = build_mcp_server(settings)
    manager = session_manager(server, settings)
    streaming = session_manager(server, settings, streaming=True)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            if telemetry is not None:
                # Last out: whatever the shutdown logs and records is still exported.
                stack.callback(telemetry.shutdown)
            try:
                runtime = await open_runtime(settings, stack, telemetry)
            except Exception as error:
                # Said in one line by `StartupFailures`: a configuration or storage problem, which
                # the operator fixes from the message, not from a traceback.
                api.state.startup_failure = " ".join(str(error).split()) or type(error).__name__
                raise
            await stack.enter_async_context(manager.run())
            await stack.enter_async_context(streaming.run())
            logger.info(
                "Anvil ready: store=%s engine=%s auth=%s",
                settings.store,
                runtime.service.engine.name,
                settings.auth_mode,
            )
            yield {"runtime": runtime}

    api = FastAPI(
        title="Anvil",
        version=app.__version__,
        description="Sessionless MCP service with conversation history.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        # FastAPI's own spans record `url.path` and `url.query`, which carry conversation ids and
        # search text; `RequestTelemetry` records the route template instead. Off, FastAPI also
        # skips looking for providers on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    add_routes(api, settings)
    # An ASGI app as a route endpoint: any method reaches it (the guard answers 405 first). It
    # goes first, as nearly every request is for it and the router tries routes in order.
    api.router.routes.insert(
        0, Route(MCP_PATH, mcp_endpoint(server, manager, streaming, settings), include_in_schema=False)
    )
    serve_head(api.router.routes)
    # Added innermost first: header checks, then sign-in, then the body (so a caller without a
    # valid token is refused before it sends one).
    # The body's deadline is the front door's (`anvil serve`), which needs no timer per request.
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
    if telemetry is not None or settings.access_log:
        # Outside the 500 handler, so a crash is seen with the status the client got.
        api.add_middleware(
            RequestTelemetry, telemetry=telemetry, access_log=settings.access_log, routes=api.router.routes
        )
    api.add_middleware(StartupFailures, state=api.state)

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is None:
            api.openapi_schema = build_openapi(api, settings)
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]
    return api
