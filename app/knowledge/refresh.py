"""Keeping a served index fresh: `IndexRefresher` looks at where the index is every so often and
hands a new version, once it has opened and checked it, to the engine that serves it.

Where the index is: a file (`FileSource`), noticed as new by its identity (device, inode, size,
modification time; `anvil index` writes a new file and renames it over the old one), or a blob
(`BlobSource`), noticed by its ETag (one HEAD request a look). Either is served from a private
copy in the data folder. A new index that does not open or does not match its version is never
handed over: the old index keeps serving, and `refused` is told why, once for that file or blob.
The same content under a new file or ETag (a rebuild of unchanged documents) has the same
version and is not swapped to.

A new version that cannot be fetched (a download cut short, storage unavailable) is not refused:
it is tried again, after 1 s, then 2, 4, ... up to a minute between tries, until it opens or
another version takes its place, and meanwhile `behind_since` says since when this replica has
served an older version than the newest it has seen (`/readyz` shows it). Each look and each
opening is given up after its deadline (`deadline.within`), so a call that never returns holds
neither the next look nor the process's exit.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Protocol

import anyio

from app.knowledge.artifact import InvalidIndex
from app.knowledge.deadline import DeadlinePassed, within
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


#: Waits before the first retry of a version that could not be fetched, doubling each time up to
#: `RETRY_MAX_SECONDS`: a storage outage is asked about a few times a minute, not every look.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0


class IndexRefresher:
    """Swaps to each new version of the index at `source` (see the module); each look and each
    opening is given up after `deadline` seconds."""

    def __init__(
        self,
        source: IndexSource,
        served: PassageIndex,
        seen: Hashable | None,
        swap: Callable[[PassageIndex], None],
        refused: Callable[[str], None],
        *,
        deadline: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.version = served.version
        self._seen = seen
        self._swap = swap
        self._refused = refused
        self._deadline = deadline
        self._clock = clock
        self._unreachable = False
        #: A newer version looked at but not served yet, since when, and when to try it again.
        self._pending: Hashable | None = None
        self._pending_since = 0.0
        self._retry_at = 0.0
        self._backoff = RETRY_FIRST_SECONDS

    @property
    def behind_since(self) -> float | None:
        """Since when (by `clock`) a newer version than the one served has been seen and could
        not be fetched; None while the newest version seen is served (or was refused)."""
        return None if self._pending is None else self._pending_since

    async def check(self) -> bool:
        """Look once; True when a new version was swapped in."""
        try:
            found = await within(self._deadline, self.source.look, name="anvil-index-look")
        except OSError as error:
            if not self._unreachable:  # said once until it answers again
                logger.warning(
                    "index: cannot look for a new version of %s: %s", self.source.name, self._reason(error)
                )
            self._unreachable = True
            return False
        self._unreachable = False
        if found is None or found == self._seen:
            self._pending = None  # nothing newer there (any more)
            return False
        now = self._clock()
        if found != self._pending:  # a version not tried yet: at once
            self._pending, self._pending_since, self._backoff = found, now, RETRY_FIRST_SECONDS
        elif now < self._retry_at:
            return False
        try:
            index, seen = await within(
                self._deadline,
                self.source.open,
                abandoned=lambda opened: opened[0].close(),
                name="anvil-index-open",
            )
        except InvalidIndex as error:
            self._seen, self._pending = found, None
            self._refused(str(error))
            return False
        except OSError as error:
            # A download cut short, storage unavailable: the same version is tried again, later
            # and later, until it opens or another takes its place.
            self._retry_at = now + self._backoff
            logger.warning(
                "index: cannot fetch the new version of %s (%s); still serving version %s, trying "
                "again in %.0f s",
                self.source.name,
                self._reason(error),
                self.version,
                self._backoff,
            )
            self._backoff = min(self._backoff * 2, RETRY_MAX_SECONDS)
            return False
        self._seen, self._pending = seen, None
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

    @staticmethod
    def _reason(error: OSError) -> str:
        if isinstance(error, DeadlinePassed):
            return f"{error} (ANVIL_INDEX_TIMEOUT_SECONDS)"
        return str(error.strerror if error.strerror and error.filename else error)

    async def run(self, interval: float) -> None:
        """`check` every `interval` seconds, until cancelled."""
        while True:
            await anyio.sleep(interval)
            try:
                await self.check()
            except Exception:  # never let one bad look stop the refreshing
                logger.exception("index: checking %s for a new version failed", self.source.name)
