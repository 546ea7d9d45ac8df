"""The long-lived objects of a running Anvil: opened and closed by the app's one lifespan, read
per request.

`lifespan(...)` opens, in order, the conversation store, the answer engine (its index built off
the event loop) and sign-in, assembles the services into a `Runtime`, starts the SDK's request
managers, and yields `{"runtime": Runtime(...)}` as the ASGI lifespan state, which the server
copies into every request's `scope["state"]`; the surfaces read it from there (`runtime_of`).
Everything opened is closed again, in reverse order, at shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from starlette.datastructures import State
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth.opened import protected_resource_metadata
from app.auth.setup import open_auth
from app.domain.ask import AskService, HistoryLimits
from app.domain.lifecycle import ConversationService
from app.domain.ports import AnswerEngine, ConversationStore, IndexStatus, Verifier
from app.domain.turn_queue import TurnQueue
from app.private_files import private_folder
from app.settings import Settings
from app.settings.embeddings import EmbeddingSettings
from app.settings.engines import EngineSettings
from app.stores.factory import open_store
from app.telemetry.instruments import Telemetry
from app.telemetry.traced import TracedEngine, TracedStore

if TYPE_CHECKING:
    from app.engines.retrieval.engine import RetrievalEngine
    from app.knowledge.build import PendingVectors
    from app.knowledge.refresh import IndexSource

logger = logging.getLogger(__name__)

#: The folder of the data folder that keeps the index built from `ANVIL_CORPUS_DIR`.
INDEX_CACHE = "index-cache"


@dataclass
class Runtime:
    """What the surfaces need at request time. `readiness` maps a check name to its probe."""

    service: AskService
    conversations: ConversationService
    #: None when sign-in is off (`ANVIL_AUTH_MODE=none`): every caller is anonymous.
    verifier: Verifier | None
    #: The RFC 9728 protected-resource document; None when sign-in is off.
    resource_metadata: dict[str, object] | None = None
    readiness: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    #: Records nothing unless an exporter is configured (`app.telemetry.setup`).
    telemetry: Telemetry = field(default_factory=Telemetry.off)
    #: The knowledge index being served, as it is now; None for an engine that reads none (echo).
    knowledge: Callable[[], IndexStatus] | None = None


def runtime_of(scope: Mapping[str, Any]) -> Runtime:
    """The runtime the lifespan put in this request's state."""
    state = scope.get("state")
    runtime = state.get("runtime") if isinstance(state, dict) else None
    if not isinstance(runtime, Runtime):
        raise RuntimeError("Anvil has not started: the ASGI server did not run the app's lifespan")
    return runtime


async def open_engine(
    settings: EngineSettings,
    embeddings: EmbeddingSettings,
    stack: AsyncExitStack,
    cache_dir: Path,
    telemetry: Telemetry,
) -> tuple[AnswerEngine, Callable[[], IndexStatus] | None]:
    """The configured answer engine, and what its knowledge index is (None for echo, which reads
    none). The index is opened (`ANVIL_INDEX`, then refreshed every `ANVIL_INDEX_REFRESH_SECONDS`),
    or built from the corpus folder and kept in `cache_dir`, off the event loop; its passages are
    embedded in the background when they have no vectors yet.

    The language-model engines answer from the same index (and embedder) as the embedded one.
    """
    if settings.answer_engine == "echo":
        from app.engines.echo import EchoEngine

        return EchoEngine(), None
    from app.engines.embeddings.factory import open_embedder
    from app.engines.retrieval.engine import RetrievalEngine
    from app.knowledge.artifact import InvalidIndex

    embedder = await anyio.to_thread.run_sync(open_embedder, embeddings, settings)
    if embedder is not None:
        stack.callback(embedder.close)
    pending: PendingVectors | None = None

    if settings.index is not None:
        from app.knowledge.refresh import source_of

        private_folder(cache_dir)
        source = source_of(settings.index, cache_dir)
        try:
            index, seen = await anyio.to_thread.run_sync(source.open)
        except InvalidIndex as error:
            raise RuntimeError(f"ANVIL_INDEX: {error}") from None
        except OSError as error:
            reason = error.strerror if error.strerror and error.filename else str(error)
            raise RuntimeError(f"ANVIL_INDEX: cannot open {settings.index}: {reason}") from None
        try:
            index.check_embedder(None if embedder is None else embedder.name)
        except InvalidIndex as error:
            index.close()
            raise RuntimeError(f"ANVIL_INDEX: {error}") from None
        retrieval = RetrievalEngine(index, embedder)
        if settings.index_refresh_seconds:
            await _refresh(retrieval, source, seen, settings.index_refresh_seconds, stack, telemetry)
    else:
        corpus = settings.corpus_path()
        if not corpus.is_dir():
            raise RuntimeError(f"ANVIL_CORPUS_DIR: {corpus} is not a folder of documents")
        from app.knowledge.build import open_cached

        index, pending = await anyio.to_thread.run_sync(
            open_cached, corpus, cache_dir, settings.corpus_site, embedder
        )
        retrieval = RetrievalEngine.serving(index, embedder, corpus)
    stack.callback(lambda: retrieval.index.close())
    if pending is not None:
        await _embed_in_background(retrieval, pending, stack)

    def status() -> IndexStatus:
        served = retrieval.index
        embedded = served.passage_count if served.vectors is not None else 0
        if pending is not None and served.vectors is None:
            # Counted as served with vectors once swapped in, not as the last batch ends.
            done = served.passage_count - pending.missing + pending.done
            embedded = max(0, min(done, served.passage_count - 1))
        return IndexStatus(
            served.version,
            served.passage_count,
            served.document_count,
            served.built_at,
            embedder=None if embedder is None else embedder.name,
            embedded=embedded,
        )

    if settings.answer_engine == "retrieval":
        return retrieval, status
    from app.engines.chat import open_chat_engine

    engine = open_chat_engine(settings, retrieval)
    stack.push_async_callback(engine.aclose)
    return engine, status


async def _embed_in_background(
    retrieval: RetrievalEngine, pending: PendingVectors, stack: AsyncExitStack
) -> None:
    """Embed the passages `pending` lacks in a worker thread, then serve the index with its
    vectors; until then questions are ranked by words. Shutting down stops it between batches."""
    from app.knowledge.build import EmbeddingCancelled

    async def embed() -> None:
        embedder = retrieval.embedder
        logger.info(
            "index: embedding %d passages with %s in the background; until it is done, questions "
            "are ranked by words alone",
            pending.missing,
            None if embedder is None else embedder.name,
        )
        try:
            index = await anyio.to_thread.run_sync(pending.run, abandon_on_cancel=True)
            retrieval.swap(index)
        except EmbeddingCancelled:
            return
        except Exception:  # the lexical index goes on serving
            logger.exception("index: embedding the passages failed; questions stay ranked by words alone")
            return
        logger.info("index: %d passages embedded; questions are ranked by words and meaning", pending.missing)

    tasks = await stack.enter_async_context(anyio.create_task_group())
    tasks.start_soon(embed)
    stack.callback(tasks.cancel_scope.cancel)
    # Closed first (last in): the thread stops at its next batch.
    stack.callback(pending.cancel)


async def _refresh(
    retrieval: RetrievalEngine,
    source: IndexSource,
    seen: Hashable | None,
    interval: float,
    stack: AsyncExitStack,
    telemetry: Telemetry,
) -> None:
    """Swap `retrieval` to each new version of the index at `source`, looked for every `interval`
    seconds until the stack closes; a new version that cannot be served is warned of and counted."""
    from app.knowledge.refresh import IndexRefresher

    def refused(reason: str) -> None:
        logger.warning("index: kept serving version %s: %s", retrieval.index.version, reason)
        telemetry.instruments.index_refusals.add(1)

    refresher = IndexRefresher(source, retrieval.index, seen, retrieval.swap, refused)
    tasks = await stack.enter_async_context(anyio.create_task_group())
    tasks.start_soon(refresher.run, interval)
    # Closed first (last in): the refreshing stops before the task group waits for it.
    stack.callback(tasks.cancel_scope.cancel)


async def open_runtime(settings: Settings, stack: AsyncExitStack, telemetry: Telemetry) -> Runtime:
    """Open the store, the answer engine and sign-in; `stack` closes them again. The store and
    the engine record through `telemetry`."""
    opened: ConversationStore = await open_store(settings, ttl_seconds=settings.history_ttl_seconds)
    stack.push_async_callback(opened.aclose)
    store = TracedStore(opened, telemetry, settings.store)
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
) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Any]]]:
    """The app's lifespan: the runtime opened, then each of `managers` run (the SDK's request
    managers), all closed again at shutdown. A failure to start is kept in `state` for
    `StartupFailures` to report."""

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
            for manager in managers:
                await stack.enter_async_context(manager())
            logger.info(
                "Anvil ready on %s: store=%s engine=%s auth=%s",
                settings.base_url,
                settings.store,
                runtime.service.engine.name,
                settings.auth_mode,
            )
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
