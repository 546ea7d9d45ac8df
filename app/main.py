"""`create_app(settings)`: the ASGI application. Importing this module starts nothing."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Router
from starlette.types import ASGIApp, Receive, Scope, Send

import app
from app.adapters.auth.setup import open_auth, protected_resource_metadata
from app.api.guard import MCP_PATH, RequestGuard
from app.api.health import liveness, readiness
from app.api.mcp import build_mcp_server
from app.api.signin import BearerAuthMiddleware
from app.domain.ask import AskService, HistoryLimits
from app.domain.lifecycle import ConversationService
from app.errors import problem_response
from app.ports import AnswerEngine, ConversationStore
from app.runtime import Runtime, RuntimeRef
from app.settings import Settings
from app.surface.mcp_http import McpEndpoint

if TYPE_CHECKING:
    from fastapi import FastAPI

logger = logging.getLogger(__name__)

WELL_KNOWN = "/.well-known/oauth-protected-resource"


async def open_store(settings: Settings) -> ConversationStore:
    """The configured conversation store, opened."""
    if settings.store == "memory":
        from app.adapters.stores.memory import MemoryStore

        return MemoryStore()
    if settings.store == "cosmos":
        from app.adapters.stores.cosmos import CosmosStore

        return await CosmosStore.open(settings)
    from app.adapters.stores.sqlite import SqliteStore

    return await SqliteStore.open(settings.data_dir / "conversations.sqlite3")


async def open_engine(settings: Settings) -> AnswerEngine:
    """The configured answer engine; the retrieval index is built off the event loop."""
    if settings.answer_engine == "echo":
        from app.adapters.engines.echo import EchoEngine

        return EchoEngine()
    from app.adapters.engines.retrieval import RetrievalEngine

    corpus = settings.corpus_path()
    if not corpus.is_dir():
        raise RuntimeError(f"ANVIL_CORPUS_DIR: {corpus} is not a folder of Markdown files")
    return await anyio.to_thread.run_sync(RetrievalEngine.build, corpus)


#: Young-generation threshold. A young collection walks every young object still alive, and
#: under load that includes each in-flight request's objects and the cycles requests leave
#: behind: 50,000 let them pile up into 15 to 60 ms pauses every couple of seconds (the p99
#: tail), where 2,000 keeps each pause to a few milliseconds for the same or less CPU.
GC_THRESHOLDS = (2_000, 20, 100)


def settle_heap() -> None:
    """Keep start-up objects (modules, schemas, the index) out of every future collection.

    They live as long as the process, so scanning them again and again only adds pauses: with
    them frozen and fewer young collections, the p99 latency tail shrinks. (No collection first:
    it would cost tens of milliseconds of start-up for garbage that is a few kilobytes.)
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    # `anvil serve` starts with collection off (app.cli.serve); a few hundred KB of start-up
    # cycles stay frozen with the rest.
    gc.enable()


class Anvil:
    """The assembled application: guard -> sign-in -> `/mcp` (MCP endpoint) or FastAPI (the rest)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runtime = RuntimeRef()
        self.mcp = build_mcp_server(self.runtime, settings)
        # Builds the SDK's session manager, which the MCP endpoint uses; its Starlette app is not
        # mounted: `/mcp` is dispatched directly, without FastAPI's routing in front of it.
        self.mcp.streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            max_request_body_size=settings.max_body_bytes,
            # Host and Origin are checked by RequestGuard for every route.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.endpoint = McpEndpoint(self.mcp)
        # The REST app (FastAPI) is built when a request first needs it: importing and assembling
        # it is ~200 ms of a cold start that `/mcp` never needs. So the lifespan runs on a bare
        # Starlette router, and these GETs (probes, sign-in discovery) are answered directly;
        # the REST app lists the same routes, calling the same code.
        self._api: FastAPI | None = None
        self._api_building = anyio.Lock()
        self._lifespan_router = Router(lifespan=self._lifespan)
        self._direct_gets: dict[str, Callable[[], Awaitable[Response]]] = {
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            WELL_KNOWN: self._resource_metadata,
            WELL_KNOWN + "/mcp": self._resource_metadata,
        }
        signed_in = BearerAuthMiddleware(
            self._route, runtime=self.runtime, resource_metadata_url=settings.base_url + WELL_KNOWN + "/mcp"
        )
        self.asgi: ASGIApp = RequestGuard(
            signed_in,
            allowed_hosts=settings.host_patterns(),
            allowed_origins=settings.origin_patterns(),
            max_body_bytes=settings.max_body_bytes,
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.asgi(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"] == MCP_PATH:
                await self.endpoint(scope, receive, send)
                return
            direct = self._direct_gets.get(scope["path"]) if scope["method"] == "GET" else None
            if direct is not None:
                await (await direct())(scope, receive, send)
                return
        elif scope["type"] == "lifespan":
            await self._lifespan_router(scope, receive, send)
            return
        await (await self._rest())(scope, receive, send)

    @property
    def api(self) -> FastAPI:
        """The REST app (every route but `/mcp`), built on first use."""
        if self._api is None:
            self._api = self._build_api()
        return self._api

    async def _rest(self) -> FastAPI:
        if self._api is None:
            async with self._api_building:
                if self._api is None:
                    # On a worker thread, so `/mcp` calls keep being answered while it builds.
                    self._api = await anyio.to_thread.run_sync(self._build_api)
        return self._api

    async def _healthz(self) -> Response:
        return JSONResponse(liveness())

    async def _readyz(self) -> Response:
        return await readiness(self.runtime.get())

    async def _resource_metadata(self) -> Response:
        document = self.runtime.get().resource_metadata
        if document is None:
            return problem_response(404, "Sign-in is off on this server (ANVIL_AUTH_MODE=none).")
        return JSONResponse(document, headers={"Cache-Control": "public, max-age=3600"})

    def _build_api(self) -> FastAPI:
        from fastapi import FastAPI

        from app.api.rest import build_router, install_error_handlers

        api = FastAPI(
            title="Anvil",
            version=app.__version__,
            description="Sessionless MCP service with conversation history.",
            lifespan=self._lifespan,
            docs_url=None,
            redoc_url=None,
        )
        install_error_handlers(api)
        api.include_router(build_router(self.runtime))

        async def metadata(_: Request) -> Response:
            return await self._resource_metadata()

        api.add_route(WELL_KNOWN, metadata, methods=["GET"], include_in_schema=False)
        api.add_route(WELL_KNOWN + "/mcp", metadata, methods=["GET"], include_in_schema=False)
        api.openapi = self._openapi  # type: ignore[method-assign]
        return api

    @asynccontextmanager
    async def _lifespan(self, _: object) -> AsyncIterator[None]:
        settings = self.settings
        async with AsyncExitStack() as stack:
            store = await open_store(settings)
            stack.push_async_callback(store.aclose)
            engine = await open_engine(settings)
            auth = await open_auth(settings)
            if auth.aclose is not None:
                stack.push_async_callback(auth.aclose)
            readiness: dict[str, Callable[[], Awaitable[None]]] = {"store": store.check}
            if auth.readiness is not None:
                readiness["signing-keys"] = auth.readiness
            service = AskService(
                store,
                engine,
                limits=HistoryLimits(
                    max_turns=settings.history_max_turns,
                    max_bytes=settings.history_max_bytes,
                    ttl_seconds=settings.history_ttl_seconds,
                ),
                max_question_chars=settings.max_question_chars,
            )
            self.runtime.set(
                Runtime(
                    settings=settings,
                    service=service,
                    conversations=ConversationService(
                        store,
                        ttl_seconds=settings.history_ttl_seconds,
                        max_instructions_chars=settings.max_question_chars,
                    ),
                    verifier=auth.verifier,
                    resource_metadata=(
                        protected_resource_metadata(settings, auth) if auth.verifier is not None else None
                    ),
                    readiness=readiness,
                )
            )
            stack.callback(self.runtime.set, None)
            await stack.enter_async_context(self.mcp.session_manager.run())
            settle_heap()
            logger.info(
                "Anvil ready: store=%s engine=%s auth=%s", settings.store, engine.name, settings.auth_mode
            )
            yield

    def _openapi(self) -> dict[str, Any]:
        if self.api.openapi_schema is None:
            self.api.openapi_schema = build_openapi(self.api, self.settings)
        return self.api.openapi_schema


def build_openapi(api: FastAPI, settings: Settings) -> dict[str, Any]:
    """The OpenAPI document API Management imports: REST routes, `/mcp`, and bearer sign-in."""
    from fastapi.openapi.utils import get_openapi

    schema = get_openapi(
        title=api.title,
        version=api.version,
        description=api.description,
        routes=api.routes,
        servers=[{"url": settings.base_url}],
    )
    schema.setdefault("components", {})["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    }
    for path, operations in schema["paths"].items():
        if path.startswith("/api/"):
            for operation in operations.values():
                operation["security"] = [{"bearer": []}]
    schema["paths"]["/mcp"] = {
        "post": {
            "operationId": "mcp",
            "summary": "MCP Streamable HTTP endpoint (JSON-RPC 2.0, stateless, every protocol revision)",
            "tags": ["mcp"],
            "security": [{"bearer": []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {
                "200": {"description": "JSON-RPC response", "content": {"application/json": {}}},
                "202": {"description": "Notification accepted"},
                "400": {"description": "JSON-RPC error (e.g. -32022 unsupported protocol version)"},
                "401": {"description": "Sign-in required; WWW-Authenticate names the resource metadata"},
            },
        }
    }
    return schema


def create_app(settings: Settings | None = None) -> Anvil:
    """Build Anvil for `settings` (read from the environment when omitted)."""
    return Anvil(settings or Settings())
