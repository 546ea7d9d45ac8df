"""The knowledge index a server serves, over its whole life: opened at start, its passages
embedded in the background, refreshed from `ANVIL_INDEX`, swapped whole, described for `/readyz`.

`open_served` opens it from `ANVIL_INDEX` (then looks for a new version every
`ANVIL_INDEX_REFRESH_SECONDS`), or builds it from the corpus folder and keeps it in the cache
folder, off the event loop. An index whose passages have no vectors yet is served by words while
a worker thread embeds them; it is swapped for the index with its vectors once they are done.
Whatever it starts (the embedding, the refreshing) stops when the stack it is given closes.

A question reads `ServedIndex.index` once, when it starts, and finishes on that index whatever
is swapped in meanwhile.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio

from app.knowledge.artifact import InvalidIndex
from app.knowledge.corpus_cache import EmbeddingCancelled, PendingVectors, open_cached
from app.knowledge.deadline import DeadlinePassed, within
from app.knowledge.index import PassageIndex
from app.knowledge.refresh import IndexRefresher, source_of
from app.knowledge.regular_files import kind
from app.knowledge.vectors import PassageEmbedder
from app.private_files import private_folder
from app.settings.engines import EngineSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedFacts:
    """What the index served now is: its version ("" for one built in memory), its passages and
    documents, when it was built, the embedder of its vectors and how many passages have theirs;
    and for how long (seconds) a newer version has been seen and could not be fetched (None: the
    newest seen is served)."""

    version: str
    passages: int
    documents: int
    built_at: float | None
    embedder: str | None
    embedded: int
    behind: float | None = None
    #: What the knowledge is called and what it covers (None: nobody said).
    name: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Naming:
    """What the knowledge is called: what the settings say (`name`, `description`) wins over what
    the index served says (`anvil index --name/--description`), which wins over `fallback`."""

    name: str | None = None
    description: str | None = None
    fallback: str | None = None

    def of(self, index: PassageIndex) -> tuple[str | None, str | None]:
        stored = index.content.get("knowledge")
        stored = stored if isinstance(stored, dict) else {}
        name, description = stored.get("name"), stored.get("description")
        name = self.name or (name if isinstance(name, str) and name else None) or self.fallback
        if self.description:
            return name, self.description
        return name, description if isinstance(description, str) and description else None


class ServedIndex:
    """The index being served, swapped whole; the embedder the vectors of an index swapped in
    must come from (None: served by words alone, which any index can be). The first index may be
    one whose vectors are still to come (`pending`)."""

    def __init__(
        self, index: PassageIndex, embedder: str | None = None, naming: Naming | None = None
    ) -> None:
        self._index = index
        self.embedder = embedder
        self.naming = naming or Naming()
        #: The vectors still being embedded for the index served, if any.
        self.pending: PendingVectors | None = None
        #: What looks for new versions of it, if anything does.
        self.refresher: IndexRefresher | None = None

    @property
    def index(self) -> PassageIndex:
        """The index being served now."""
        return self._index

    def swap(self, index: PassageIndex) -> None:
        """Serve `index` from now on; `InvalidIndex` (and the old one kept) when its vectors come
        from another embedder than the served one's."""
        index.check_embedder(self.embedder)
        self._index = index

    def facts(self) -> ServedFacts:
        served = self._index
        embedded = served.passage_count if served.vectors is not None else 0
        pending = self.pending
        if pending is not None and served.vectors is None:
            # Counted as served with vectors once swapped in, not as the last batch ends.
            done = served.passage_count - pending.missing + pending.done
            embedded = max(0, min(done, served.passage_count - 1))
        since = None if self.refresher is None else self.refresher.behind_since
        return ServedFacts(
            served.version,
            served.passage_count,
            served.document_count,
            served.built_at,
            self.embedder,
            embedded,
            None if since is None else max(0.0, time.monotonic() - since),
            *self.naming.of(served),
        )

    def close(self) -> None:
        self._index.close()


async def open_served(
    settings: EngineSettings,
    embedder: PassageEmbedder | None,
    cache_dir: Path,
    stack: AsyncExitStack,
    refused: Callable[[], None] = lambda: None,
) -> ServedIndex:
    """The index the settings name, served until `stack` closes (see the module). A new version
    that cannot be served is warned of and reported to `refused`; one that cannot be opened at
    start raises `RuntimeError`, naming the setting."""
    name = None if embedder is None else embedder.name
    if settings.index is not None:
        private_folder(cache_dir)
        source = source_of(settings.index, cache_dir)
        try:
            index, seen = await within(
                settings.index_timeout_seconds,
                source.open,
                abandoned=lambda opened: opened[0].close(),
                name="anvil-index-open",
            )
        except InvalidIndex as error:
            raise RuntimeError(f"ANVIL_INDEX: {error}") from None
        except DeadlinePassed as error:
            raise RuntimeError(
                f"ANVIL_INDEX: {settings.index} was not opened: {error}: check that it can be reached, "
                "or raise ANVIL_INDEX_TIMEOUT_SECONDS for an index that takes longer to download"
            ) from None
        except OSError as error:
            reason = error.strerror if error.strerror and error.filename else str(error)
            raise RuntimeError(f"ANVIL_INDEX: cannot open {settings.index}: {reason}") from None
        try:
            index.check_embedder(name)
        except InvalidIndex as error:
            index.close()
            raise RuntimeError(f"ANVIL_INDEX: {error}") from None
        served = ServedIndex(index, name, naming_of(settings))
        stack.callback(served.close)
        if settings.index_refresh_seconds:
            refresher = IndexRefresher(
                source,
                index,
                seen,
                served.swap,
                _refuse(served, refused),
                deadline=settings.index_timeout_seconds,
            )
            await _refresh(served, refresher, settings.index_refresh_seconds, stack)
        return served
    corpus = settings.corpus_path()
    if not corpus.is_dir():
        raise RuntimeError(f"ANVIL_CORPUS_DIR: {_not_a_folder(corpus)}")
    index, pending = await anyio.to_thread.run_sync(
        open_cached,
        corpus,
        cache_dir,
        settings.corpus_site,
        embedder,
        settings.max_document_bytes,
        settings.corpus_site_style,
    )
    served = ServedIndex(index, name, naming_of(settings))
    stack.callback(served.close)
    if not index.document_count:
        logger.warning(
            "corpus: %s holds no document with text, so every question will be "
            "answered that nothing was found: add documents there, or set ANVIL_CORPUS_DIR",
            corpus,
        )
    if pending is not None:
        served.pending = pending
        await _embed_in_background(served, pending, stack)
    return served


def naming_of(settings: EngineSettings) -> Naming:
    """What the served knowledge is called (`Naming`): the settings' name and description; for a
    corpus folder of the settings, its folder's name when they name none."""
    name, description = settings.knowledge_named()
    fallback = None
    if name is None and settings.index is None:
        fallback = settings.corpus_path().resolve().name
    return Naming(name, description, fallback)


class TenthsTold:
    """Says in the log how far a background embedding is, once per tenth of it done, with the
    time it has left at the rate so far (it hears `(done, of)` from the worker thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._began = clock()
        self._told = 0  # tenths said so far

    def __call__(self, done: int, of: int) -> None:
        tenths = done * 10 // of if of else 10
        if tenths <= self._told or done >= of:
            return  # the end is said by the line that swaps the index in
        self._told = tenths
        elapsed = self._clock() - self._began
        logger.info(
            "index: embedded %d of %d passages in the background (%d %%), about %.0f s left",
            done,
            of,
            tenths * 10,
            elapsed / done * (of - done),
        )


async def _embed_in_background(served: ServedIndex, pending: PendingVectors, stack: AsyncExitStack) -> None:
    """Embed the passages `pending` lacks in a worker thread, then serve the index with its
    vectors; until then questions are ranked by words. Shutting down stops it between batches."""

    async def embed() -> None:
        logger.info(
            "index: embedding %d passage%s with %s in the background; until it is done, questions "
            "are ranked by words alone",
            pending.missing,
            "" if pending.missing == 1 else "s",
            served.embedder,
        )
        try:
            told = TenthsTold()
            index = await anyio.to_thread.run_sync(pending.run, told, abandon_on_cancel=True)
            served.swap(index)
        except EmbeddingCancelled:
            return
        except Exception:  # the lexical index goes on serving
            logger.exception("index: embedding the passages failed; questions stay ranked by words alone")
            return
        served.pending = None
        logger.info(
            "index: %d passage%s embedded; questions are ranked by words and meaning",
            pending.missing,
            "" if pending.missing == 1 else "s",
        )

    tasks = await stack.enter_async_context(anyio.create_task_group())
    tasks.start_soon(embed)
    stack.callback(tasks.cancel_scope.cancel)
    # Closed first (last in): the thread stops at its next batch.
    stack.callback(pending.cancel)


def _refuse(served: ServedIndex, refused: Callable[[], None]) -> Callable[[str], None]:
    """What hears that a new version cannot be served: a warning, and `refused`."""

    def refuse(reason: str) -> None:
        logger.warning("index: kept serving version %s: %s", served.index.version, reason)
        refused()

    return refuse


async def _refresh(
    served: ServedIndex, refresher: IndexRefresher, interval: float, stack: AsyncExitStack
) -> None:
    """Swap `served` to each new version `refresher` finds, looked for every `interval` seconds
    until the stack closes."""
    served.refresher = refresher
    tasks = await stack.enter_async_context(anyio.create_task_group())
    tasks.start_soon(refresher.run, interval)
    # Closed first (last in): the refreshing stops before the task group waits for it; a look or
    # an opening under way is not waited for (`deadline.within`).
    stack.callback(tasks.cancel_scope.cancel)


def _not_a_folder(path: Path) -> str:
    """Why `path` is not a folder of documents, in words."""
    try:
        found = kind(os.stat(path).st_mode)
    except FileNotFoundError:
        return f"{path} does not exist: give a folder of documents"
    except OSError as error:
        return f"{path} cannot be looked at ({error.strerror or error}): give a folder of documents"
    return f"{path} is {found}, not a folder of documents: give a folder of documents"
