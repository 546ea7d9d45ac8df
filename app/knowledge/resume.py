"""Keeping the vectors of an embedding that has not finished, so that the next one resumes it.

Embedding a corpus can take hours on a CPU, and a server can be stopped, or an embeddings
endpoint go down, part-way. While passages are embedded, what is done so far is written beside
the index to be kept (`partial_path`: the same name, `.partial`) every `INTERVAL` seconds, and
when the embedding stops early for any reason; the next build of the same corpus reads it
(`so_far`) and embeds only the passages still missing. Once the index is kept, it is removed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from app.knowledge.artifact import InvalidIndex
from app.knowledge.vectors import Vectors, read_vectors, write_vectors
from app.private_files import PRIVATE_FILE, describe, private_folder

logger = logging.getLogger(__name__)

#: The suffix of the vectors so far of an index not yet kept.
SUFFIX = ".partial"
#: How often (seconds) an embedding under way keeps what it has done; never more often than
#: every `SPACING` times as long as keeping took the last time, so that rewriting the vectors of a
#: large corpus quickly embedded (by a service) never takes more than a tenth of the time.
INTERVAL = 30.0
SPACING = 10


def partial_path(index: Path) -> Path:
    """Where the vectors so far of the index to be kept at `index` are kept until it is."""
    return index.with_suffix(SUFFIX)


def so_far(index: Path) -> dict[bytes, Vectors]:
    """The vectors an embedding of the index to be kept at `index` kept before it stopped, by key
    (none if it did not stop early, or if they cannot be read)."""
    path = partial_path(index)
    if not path.is_file():
        return {}
    try:
        found = read_vectors(path)
    except (InvalidIndex, OSError) as error:
        logger.info("index: no vectors reused from %s (%s)", path, error)
        return {}
    logger.info("index: %d passages embedded before the last stop are reused", len(found))
    return found


class Checkpoint:
    """The vectors one embedding has made (`new`, filled by `embed_arrays`), kept at
    `partial_path(index)` by `tick` every `INTERVAL` seconds and by `keep` when it stops early."""

    def __init__(
        self, index: Path, embedder: str, keys: Sequence[bytes], reuse: Mapping[bytes, Vectors]
    ) -> None:
        self._target = partial_path(index)
        self._embedder = embedder
        self._keys = keys
        self._reuse = reuse
        self.new: dict[bytes, Vectors] = {}
        self._kept_at = time.monotonic()
        self._took = 0.0

    def tick(self) -> None:
        """A batch is done: keep what there is if `INTERVAL` has passed since it was last kept
        (and `SPACING` times as long as that took)."""
        if time.monotonic() - self._kept_at >= max(INTERVAL, SPACING * self._took):
            self.keep()

    def keep(self) -> None:
        """Keep the corpus's vectors so far, new and reused, if any are new (a warning, and
        nothing kept, when they cannot be written). Safe from another thread than the one
        embedding: `new` is copied in one step (a dict's copy holds the GIL throughout) and the
        file replaced whole, so of two keeps at once one or the other is left."""
        started = self._kept_at = time.monotonic()
        new = self.new.copy()
        if not new:
            return
        found = {
            key: vector for key in self._keys if (vector := new.get(key, self._reuse.get(key))) is not None
        }
        try:
            private_folder(self._target.parent)
            write_vectors(self._target, self._embedder, found, mode=PRIVATE_FILE)
            self._took = time.monotonic() - started
        except OSError as error:
            logger.warning(
                "index: the passages embedded so far are not kept, so the next build embeds them "
                "again, because %s",
                describe(error, "keep them in", self._target.parent),
            )
