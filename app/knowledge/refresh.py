"""Keeping a served index fresh: `IndexRefresher` looks at where the index is every so often and
hands a new version, once it has opened and checked it, to the engine that serves it.

Where the index is: a file (`FileSource`), noticed as new by its identity (device, inode, size,
modification time; `anvil index` writes a new file and renames it over the old one), or a blob
(`BlobSource`), noticed by its ETag (one HEAD request a look). Either is served from a private
copy in the data folder. A new index that does not open or does not match its version is never
handed over: the old index keeps serving, and `refused` is told why, once for that file or blob.
The same content under a new file or ETag (a rebuild of unchanged documents) has the same
version and is not swapped to.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Protocol

import anyio

from app.knowledge.artifact import InvalidIndex
from app.knowledge.index import PassageIndex

logger = logging.getLogger(__name__)


class IndexSource(Protocol):
    """Where an index is served from. Both calls block (run them off the event loop)."""

    name: str

    def look(self) -> Hashable | None:
        """What tells this version from the next (None: there is no index there)."""

    def open(self) -> tuple[PassageIndex, Hashable | None]:
        """The index there now, and what `look` says of exactly that version."""


class FileSource:
    """An index file (`ANVIL_INDEX=/path/docs.anvilidx`)."""

    def __init__(self, path: Path, copy_to: Path) -> None:
        self.path = path
        self.name = str(path)
        self._copy_to = copy_to

    def look(self) -> tuple[int, int, int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)

    def open(self) -> tuple[PassageIndex, Hashable | None]:
        seen = self.look()
        return PassageIndex.open(self.path, copy_to=self._copy_to), seen


class BlobSource:
    """An index blob (`ANVIL_INDEX=https://ACCOUNT.blob.core.windows.net/CONTAINER/docs.anvilidx`)."""

    def __init__(self, url: str, copy_to: Path) -> None:
        self.name = url
        self._copy_to = copy_to

    def look(self) -> str | None:
        from app.knowledge.blob import blob_version

        return blob_version(self.name)

    def open(self) -> tuple[PassageIndex, Hashable | None]:
        from app.knowledge.blob import download

        etags: list[str] = []
        index = PassageIndex.open(
            self.name, copy_to=self._copy_to, fill=lambda into: etags.append(download(self.name, into))
        )
        return index, etags[0]


def source_of(location: str, copy_to: Path) -> IndexSource:
    """The source `ANVIL_INDEX` names: a blob URL or a file path."""
    from app.blob_urls import is_blob_url

    return BlobSource(location, copy_to) if is_blob_url(location) else FileSource(Path(location), copy_to)


class IndexRefresher:
    """Swaps to each new version of the index at `source` (see the module)."""

    def __init__(
        self,
        source: IndexSource,
        served: PassageIndex,
        seen: Hashable | None,
        swap: Callable[[PassageIndex], None],
        refused: Callable[[str], None],
    ) -> None:
        self.source = source
        self.version = served.version
        self._seen = seen
        self._swap = swap
        self._refused = refused
        self._unreachable = False

    async def check(self) -> bool:
        """Look once; True when a new version was swapped in."""
        try:
            found = await anyio.to_thread.run_sync(self.source.look)
        except OSError as error:
            if not self._unreachable:  # said once until it answers again
                logger.warning("index: cannot look for a new version of %s: %s", self.source.name, error)
            self._unreachable = True
            return False
        self._unreachable = False
        if found is None or found == self._seen:
            return False
        try:
            index, seen = await anyio.to_thread.run_sync(self.source.open)
        except InvalidIndex as error:
            self._seen = found
            self._refused(str(error))
            return False
        except OSError as error:
            self._seen = found
            self._refused(f"cannot open {self.source.name}: {error.strerror or error}")
            return False
        self._seen = seen
        if index.version == self.version:
            index.close()
            return False
        try:
            self._swap(index)
        except InvalidIndex as error:  # the swap's own check: another embedder's vectors, say
            index.close()
            self._refused(str(error))
            return False
        logger.info("index: now serving version %s (%d passages)", index.version, index.passage_count)
        self.version = index.version
        return True

    async def run(self, interval: float) -> None:
        """`check` every `interval` seconds, until cancelled."""
        while True:
            await anyio.sleep(interval)
            try:
                await self.check()
            except Exception:  # never let one bad look stop the refreshing
                logger.exception("index: checking %s for a new version failed", self.source.name)
