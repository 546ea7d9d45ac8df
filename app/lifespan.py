"""The long-lived objects of a running Anvil: opened and closed by the app's one lifespan, read
per request.

`lifespan(...)` opens, in order, the conversation store, the served knowledge index and the
answer engine, and sign-in, assembles the services into a `Runtime` (`app.runtime`), starts the
SDK's request managers, and yields `{"runtime": Runtime(...)}` as the ASGI lifespan state, which
the server copies into every request's `scope["state"]`; the surfaces read it from there
(`runtime_of`). Everything opened is closed again, in reverse order, at shutdown. It composes:
what each part does while it runs is the part's own (the index's life is `app.knowledge.served`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from starlette.datastructures import State
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth.opened import protected_resource_metadata
from app.auth.setup import open_auth
from app.domain.ask import AskService, HistoryLimits
from app.domain.lifecycle import ConversationService
from app.domain.ports import AnswerEngine, ConversationStore, KnowledgeIndex
from app.domain.turn_queue import TurnQueue
from app.runtime import Runtime
from app.settings import Settings
from app.settings.embeddings import EmbeddingSettings
from app.settings.engines import EngineSettings
from app.stores.factory import open_store
from app.stores.guarded import GuardedStore
from app.telemetry.instruments import Telemetry
from app.telemetry.traced import TracedEngine, TracedStore

#: The folder of the data folder that keeps the index built from `ANVIL_CORPUS_DIR`.
INDEX_CACHE = "index-cache"


async def open_engine(
    settings: EngineSettings,
    embeddings: EmbeddingSettings,
    stack: AsyncExitStack,
    cache_dir: Path,
    telemetry: Telemetry,
) -> tuple[AnswerEngine, KnowledgeIndex | None]:
    """The configured answer engine and the knowledge it answers from (None for echo, which
    reads none): the served index (`app.knowledge.served`), ranked by the embedded engine, which
    the language-model engines retrieve through too."""
    if settings.answer_engine == "echo":
        from app.engines.echo import EchoEngine

        return EchoEngine(), None
    from app.engines.embeddings.factory import open_embedder
    from app.engines.retrieval.engine import RetrievalEngine
    from app.knowledge.served import open_served

    embedder = await anyio.to_thread.run_sync(open_embedder, embeddings, settings)
    if embedder is not None:
        stack.callback(embedder.close)
    served = await open_served(
        settings, embedder, cache_dir, stack, refused=lambda: telemetry.instruments.index_refusals.add(1)
    )
    retrieval = RetrievalEngine(served, embedder, max_answer_chars=settings.answer_max_chars)
    if settings.answer_engine == "retrieval":
        return retrieval, retrieval
    from app.engines.chat import open_chat_engine

    engine = open_chat_engine(settings, retrieval)
    stack.push_async_callback(engine.aclose)
    return engine, retrieval


async def open_runtime(settings: Settings, stack: AsyncExitStack, telemetry: Telemetry) -> Runtime:
    """Open the store, the answer engine and sign-in; `stack` closes them again. The store and
    the engine record through `telemetry`."""
    opened: ConversationStore = await open_store(settings, ttl_seconds=settings.history_ttl_seconds)
    stack.push_async_callback(opened.aclose)
    store = TracedStore(GuardedStore(opened, settings.store_timeout_seconds), telemetry, settings.store)
    engine, knowledge = await open_engine(
        settings, settings, stack, settings.data_dir / INDEX_CACHE, telemetry
    )
    engine = TracedEngine(engine, telemetry, settings.model_name)
    auth = await open_auth(settings)
    if auth.aclose is not None:
        stack.push_async_callback(auth.aclose)
    readiness: dict[str, Callable[[], Awaitable[None]]] = {"store": store.check}
    if auth.readiness is not None:
        readiness["signing-keys"] = auth.readiness
    # One queue of writers for both services: a delete makes the writers forget the conversation.
    writers = TurnQueue()
    return Runtime(
        service=AskService(
            store,
            engine,
            limits=HistoryLimits(
                max_turns=settings.history_max_turns,
                max_bytes=settings.history_max_bytes,
                ttl_seconds=settings.history_ttl_seconds,
            ),
            max_conversations=settings.max_conversations_per_user,
            writers=writers,
        ),
        conversations=ConversationService(
            store,
            ttl_seconds=settings.history_ttl_seconds,
            max_conversations=settings.max_conversations_per_user,
            writers=writers,
        ),
        verifier=auth.verifier,
        knowledge=knowledge,
        resource_metadata=protected_resource_metadata(settings.resource_url, auth)
        if auth.verifier is not None
        else None,
        readiness=readiness,
        telemetry=telemetry,
    )


def lifespan(
    settings: Settings,
    telemetry: Telemetry,
    managers: tuple[Callable[[], AbstractAsyncContextManager[Any]], ...],
    state: State,
    opened: Callable[[Runtime], None] = lambda _: None,
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """The app's lifespan: the runtime opened (and handed to `opened`), then each of `managers`
    run (the SDK's request managers), all closed again at shutdown. A failure to start is kept
    in `state` for `StartupFailures` to report."""

    @asynccontextmanager
    async def run(_: Any) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            # Last out: whatever the shutdown logs and records is still exported.
            stack.callback(telemetry.shutdown)
            try:
                runtime = await open_runtime(settings, stack, telemetry)
            except Exception as error:
                # Said in one line by `StartupFailures`: a configuration or storage problem, which
                # the operator fixes from the message, not from a traceback.
                state.startup_failure = " ".join(str(error).split()) or type(error).__name__
                raise
            opened(runtime)
            for manager in managers:
                await stack.enter_async_context(manager())
            # "Anvil ready" is `anvil serve`'s to say, once its socket is being served too.
            yield {"runtime": runtime}

    return run


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
