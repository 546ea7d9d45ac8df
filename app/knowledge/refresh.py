"""Keeping a served index fresh: `IndexRefresher` looks at the index file every so often and
hands a new version, once it has opened and checked it, to the engine that serves it.

A new file is noticed by its identity (device, inode, size, modification time): `anvil index`
writes a new file and renames it over the old one, so each new index is a new inode. One that
does not open or does not match its version is never handed over: the old index keeps serving,
and `refused` is told why, once for that file. The same content under a new file (a rebuild of
unchanged documents) has the same version and is not swapped to.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path

import anyio

from app.knowledge.artifact import InvalidIndex
from app.knowledge.index import KnowledgeIndex

logger = logging.getLogger(__name__)

Identity = tuple[int, int, int, int]


def identity_of(path: Path) -> Identity | None:
    """What tells one file at `path` from the next: None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


class IndexRefresher:
    """Swaps to each new version of the index at `path` (see the module)."""

    def __init__(
        self,
        path: Path,
        served: KnowledgeIndex,
        swap: Callable[[KnowledgeIndex], None],
        refused: Callable[[str], None],
        *,
        copy_to: Path | None = None,
    ) -> None:
        self.path = path
        self._copy_to = copy_to
        self.version = served.version
        self._swap = swap
        self._refused = refused
        self._seen = identity_of(path)

    async def check(self) -> bool:
        """Look at the file once; True when a new version was swapped in."""
        found = identity_of(self.path)
        if found is None or found == self._seen:
            return False
        self._seen = found
        try:
            index = await anyio.to_thread.run_sync(
                functools.partial(KnowledgeIndex.open, self.path, copy_to=self._copy_to)
            )
        except InvalidIndex as error:
            self._refused(str(error))
            return False
        except OSError as error:
            self._refused(f"cannot open {self.path}: {error.strerror or error}")
            return False
        if index.version == self.version:
            index.close()
            return False
        self._swap(index)
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
                logger.exception("index: checking %s for a new version failed", self.path)
