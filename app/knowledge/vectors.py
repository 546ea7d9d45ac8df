"""The passage vectors of a knowledge index: computed when it is built, kept by content hash.

Each passage is embedded as its heading chain and its text (`passage_text`). Next to the vectors
the index keeps each one's key: a hash of the embedder's name and of that text. Building again
with the previous index at hand (`reusable`) embeds only the passages whose key it lacks, so a
changed page costs the embeddings of its changed passages, not of the corpus.

The embedder is anything with a `name`, a `batch_size` and `embed(texts, query=...)` returning
unit-length float32 rows (the `Embedder` port; the index knows no adapter).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from app.knowledge.artifact import IndexFile, InvalidIndex, write_index

logger = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]
#: Length of a vector's key: the first bytes of a SHA-256.
KEY_BYTES = 16


class PassageEmbedder(Protocol):
    name: str
    batch_size: int

    def embed(self, texts: Sequence[str], *, query: bool) -> Vectors: ...


class EmbedderMismatch(InvalidIndex):
    """An index whose vectors come from another embedder than the one asked for (or from none)."""


def passage_text(heading: str, text: str) -> str:
    """What is embedded of a passage: its heading chain, then its text."""
    return f"{heading}\n\n{text}"


def vector_key(embedder: str, text: str) -> bytes:
    """The key of `text`'s vector by `embedder`."""
    return hashlib.sha256(f"{embedder}\0{text}".encode()).digest()[:KEY_BYTES]


def embed_arrays(
    texts: Sequence[str],
    embedder: PassageEmbedder,
    reuse: Mapping[bytes, Vectors] | None = None,
    progress: Callable[[int, int], None] | None = None,
    batch: int | None = None,
    into: dict[bytes, Vectors] | None = None,
) -> tuple[dict[str, npt.NDArray[Any]], int]:
    """The `vectors` and `vectors.keys` sections for `texts`, and how many texts were embedded
    (the others' vectors were found in `reuse` by key), `batch` at a time (default: the embedder's
    batch size). `progress` hears (done, of) as batches end; by then each new vector is in `into`
    too, by key, if given."""
    keys = [vector_key(embedder.name, text) for text in texts]
    reuse = reuse or {}
    missing = [n for n, key in enumerate(keys) if key not in reuse]
    found: dict[int, Vectors] = {}
    batch = max(1, batch or embedder.batch_size)
    if progress is not None and missing:
        progress(0, len(missing))
    for start in range(0, len(missing), batch):
        numbers = missing[start : start + batch]
        rows = embedder.embed([texts[n] for n in numbers], query=False)
        for n, row in zip(numbers, rows, strict=True):
            found[n] = row
            if into is not None:
                into[keys[n]] = row
        if progress is not None:
            progress(start + len(numbers), len(missing))
    chosen = [found[n] if n in found else reuse[key] for n, key in enumerate(keys)]
    dimensions = _dimensions(chosen, reuse)
    vectors = np.array(chosen, dtype=np.float32).reshape(len(texts), dimensions)
    key_array = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(texts), KEY_BYTES)
    return {"vectors": vectors, "vectors.keys": key_array}, len(missing)


def _dimensions(rows: Sequence[Vectors], reuse: Mapping[bytes, Vectors]) -> int:
    lengths = {len(row) for row in rows}
    if len(lengths) > 1:
        raise ValueError(f"the embedder returned vectors of {len(lengths)} different lengths")
    if lengths:
        return lengths.pop()
    return len(next(iter(reuse.values()))) if reuse else 0


def reusable(
    name: str | None, vectors: Vectors | None, keys: npt.NDArray[np.uint8] | None
) -> dict[bytes, Vectors]:
    """The vectors of an index by key, when they come from embedder `name` (else none)."""
    if name is None or vectors is None or keys is None:
        return {}
    return {bytes(key): vector for key, vector in zip(keys, vectors, strict=True)}


def write_vectors(target: Path, embedder: str, vectors: Mapping[bytes, Vectors], *, mode: int) -> None:
    """Keep `vectors` (by key, all from `embedder`) in a file of their own, atomically: what an
    embedding that stopped half-way had done, for the next one to reuse (`read_vectors`)."""
    keys = list(vectors)
    dimensions = len(next(iter(vectors.values()))) if vectors else 0
    arrays: dict[str, npt.NDArray[Any]] = {
        "vectors": np.array([vectors[key] for key in keys], dtype=np.float32).reshape(len(keys), dimensions),
        "vectors.keys": np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), KEY_BYTES),
    }
    stamp = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_index(target, arrays, {"embedder": {"name": embedder}, "partial": True}, stamp, mode=mode)


def read_vectors(path: Path) -> dict[bytes, Vectors]:
    """The vectors `write_vectors` kept at `path`, by key (copied out of the file, which is closed);
    `InvalidIndex` or `OSError` when it cannot be read."""
    file = IndexFile(path)
    try:
        embedder = file.content.get("embedder")
        name = embedder.get("name") if isinstance(embedder, dict) else None
        if not file.content.get("partial") or not isinstance(name, str):
            raise InvalidIndex(f"{path} holds no vectors kept by an embedding that stopped")
        vectors, keys = file.array("vectors"), file.array("vectors.keys")
        return {key: vector.copy() for key, vector in reusable(name, vectors, keys).items()}
    finally:
        file.close()


#: A folder's seed of passage vectors: what a build or a first start over the folder reuses for
#: every passage whose text (and embedder) is unchanged, so that it embeds only what changed.
SEED = ".anvil-vectors"


def seed_vectors(folder: Path) -> dict[bytes, Vectors]:
    """The vectors kept in `folder`'s seed (`SEED`), by key; none when it has no seed, or one
    that cannot be read (said at INFO: a seed only saves time)."""
    path = folder / SEED
    if not path.is_file():
        return {}
    try:
        return read_vectors(path)
    except (InvalidIndex, OSError) as error:
        logger.info("index: the vector seed %s is not reused (%s)", path, error)
        return {}
