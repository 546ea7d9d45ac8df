"""The index of `ANVIL_CORPUS_DIR` that `anvil serve` builds at start-up, kept in the data folder.

Without `ANVIL_INDEX`, `anvil serve` indexes `ANVIL_CORPUS_DIR`, and keeps the index in the data
folder under the corpus's content hash (of the files' paths and bytes, read but not parsed): a
restart over an unchanged folder opens it without parsing a document, and a changed file (or
another version of Anvil) gives another hash, so the index is built anew and the old one removed.

With an embedder, the key names it too, and the passages' vectors go into the kept index. Those
take long to compute on a CPU (seconds for a page), so a first start over a new corpus serves
its lexical index at once and embeds in the background (`PendingVectors`); the index with vectors
replaces it when done. Vectors of an earlier index kept there are reused by key, so a changed
file costs the embeddings of its changed passages only.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy.typing as npt

from app import __version__
from app.knowledge import resume
from app.knowledge.artifact import FORMAT, InvalidIndex
from app.knowledge.build import SUFFIX, Source, site_pages, vectors_of
from app.knowledge.corpus_files import parse_corpus, read_bytes, read_corpus
from app.knowledge.index import PassageIndex, add_vectors, write_arrays
from app.knowledge.readers.documents import MAX_DOCUMENT_BYTES
from app.knowledge.resume import Checkpoint
from app.knowledge.sections import LEXICAL, build_arrays, passage_texts
from app.knowledge.vectors import SEED, PassageEmbedder, Vectors, seed_vectors, vector_key
from app.private_files import PRIVATE_FILE, describe, private_folder

logger = logging.getLogger(__name__)


def corpus_key(
    contents: Sequence[tuple[str, bytes]],
    site: str | None = None,
    embedder: str | None = None,
    style: str | None = None,
) -> str:
    """A hash of the files an index is built from (each path and its bytes), of the site they are
    published at and its style, of the embedder of their vectors, and of the version of Anvil
    that indexes them and the code that reads and cuts them (`reading_code`)."""
    digest = hashlib.sha256(
        f"{__version__}\0{FORMAT}\0{LEXICAL}\0{site or ''}\0{embedder or ''}\0{style or ''}\0".encode()
    )
    digest.update(reading_code())
    for source, data in contents:
        encoded = source.encode()
        digest.update(len(encoded).to_bytes(8, "little") + encoded + len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:32]


@functools.cache
def reading_code() -> bytes:
    """A hash of the source of the readers and of what cuts their text into passages: an index
    kept by a build whose reading differs, in the same version (a checkout being worked on), is
    not opened as if it were this one's."""
    knowledge = Path(__file__).parent
    cutting = [knowledge / name for name in ("corpus.py", "chunks.py", "sections.py", "sites.py")]
    files = sorted([*(knowledge / "readers").glob("*.py"), *cutting])
    digest = hashlib.sha256()
    for path in files:
        try:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        except OSError:
            digest.update(path.name.encode() + b"\0")
    return digest.digest()


def index_folder(
    corpus_dir: Path,
    cache_dir: Path | None = None,
    site: str | None = None,
    embedder: PassageEmbedder | None = None,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    style: str | None = None,
) -> PassageIndex:
    """The index of every document under `corpus_dir` (none larger than `max_bytes`), its vectors
    computed before it returns (blocking): in memory, or kept in `cache_dir` and opened from it
    while the folder is unchanged (`open_cached`), its pages published under `site` by a
    generator of `style` (None: sniffed, `sites.sniff`)."""
    if cache_dir is not None:
        index, pending = open_cached(corpus_dir, cache_dir, site, embedder, max_bytes, style)
        return index if pending is None else pending.run()
    files = read_corpus(corpus_dir, max_bytes=max_bytes)
    urls, styles = site_pages(files, site, Source(corpus_dir, site, style=style).site_style)
    arrays, content = build_arrays(files, urls=urls, styles=styles)
    if embedder is not None:
        add_vectors(arrays, content, embedder)
    return PassageIndex.of_arrays(arrays, content)


def open_cached(
    corpus_dir: Path,
    cache_dir: Path,
    site: str | None = None,
    embedder: PassageEmbedder | None = None,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    style: str | None = None,
) -> tuple[PassageIndex, PendingVectors | None]:
    """The index of `corpus_dir` (its pages published under `site`, if given, by a generator of
    `style` (None: sniffed, `sites.sniff`); its passages
    embedded by `embedder`, if given; no document larger than `max_bytes`), opened from
    `cache_dir` if built before, else built and kept there; built in memory only when the cache
    cannot be written (with a warning saying why). While passages still need vectors, the index
    returned is lexical, and the vectors are left to the `PendingVectors` returned with it."""
    contents = read_bytes(corpus_dir, max_bytes)
    site_style = Source(corpus_dir, site, style=style).site_style
    named = None if site_style is None else site_style.name
    key = corpus_key(contents, site, None if embedder is None else embedder.name, named)
    path = cache_dir / f"{key}{SUFFIX}"
    if path.is_file():
        try:
            return PassageIndex.open(path), None
        except InvalidIndex as error:
            logger.warning("corpus: the cached index cannot be served (%s); building it again", error)
    files = parse_corpus(corpus_dir, contents)
    urls, styles = site_pages(files, site, site_style)
    arrays, content = build_arrays(files, urls=urls, styles=styles)
    if embedder is not None:
        earlier = sorted(p for p in cache_dir.glob(f"*{SUFFIX}") if p != path) if cache_dir.is_dir() else []
        seed = seed_vectors(corpus_dir)
        reuse = {**seed, **vectors_of(earlier)}
        reuse.update(resume.so_far(path))
        pending = PendingVectors(arrays, content, embedder, reuse, path, str(corpus_dir))
        if pending.missing:
            return PassageIndex.of_arrays(arrays, content), pending
        logger.info(
            "index: every passage's vector was kept (%s), none to embed; questions are ranked by "
            "words and meaning",
            f"in {corpus_dir / SEED}" if seed else "by an earlier index",
        )
        return pending.run(), None
    return _kept(arrays, content, path, str(corpus_dir)), None


def _kept(
    arrays: Mapping[str, npt.NDArray[Any]], content: dict[str, Any], path: Path, corpus: str
) -> PassageIndex:
    """Write the index to `path` in its private folder and open it there, the other indexes
    kept beside it removed; in memory if it cannot be written."""
    try:
        private_folder(path.parent)
        write_arrays(arrays, content, path, sources=[corpus], mode=PRIVATE_FILE)
    except OSError as error:
        logger.warning(
            "corpus: the index is built at every start because %s",
            describe(error, "keep the index in", path.parent),
        )
        return PassageIndex.of_arrays(dict(arrays), content)
    for other in (*path.parent.glob(f"*{SUFFIX}"), *path.parent.glob(f"*{resume.SUFFIX}")):
        if other != path:
            other.unlink(missing_ok=True)
    return PassageIndex.open(path)


#: Passages a background embedding sends at a time: it stops between two batches when the
#: server shuts down, so a batch is what shutting down may wait for (about a second on a CPU).
BACKGROUND_BATCH = 4


class EmbeddingCancelled(Exception):
    """`PendingVectors.run` stopped between two batches because it was asked to."""


class PendingVectors:
    """The vectors a lexical index still needs, computed by `run` (blocking, in batches, which
    `cancel` stops between), then kept as `open_cached` keeps an index.

    What it has done is kept as it goes, and when it is cancelled or fails (`resume`), so that
    the next start embeds only what is still missing.
    """

    def __init__(
        self,
        arrays: dict[str, npt.NDArray[Any]],
        content: dict[str, Any],
        embedder: PassageEmbedder,
        reuse: dict[bytes, Vectors],
        path: Path,
        corpus: str,
    ) -> None:
        self._arrays = arrays
        self._content = content
        self._embedder = embedder
        self._reuse = reuse
        self._path = path
        self._corpus = corpus
        self._texts = passage_texts(arrays)
        keys = [vector_key(embedder.name, text) for text in self._texts]
        self.missing = sum(key not in reuse for key in keys)
        #: How many of the missing passages have been embedded so far.
        self.done = 0
        self._checkpoint = Checkpoint(path, embedder.name, keys, reuse)
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop `run` at its next batch, and keep what it has done now: a process shutting down
        may not wait for that batch."""
        self._cancelled.set()
        self._checkpoint.keep()

    def run(self, progress: Callable[[int, int], None] | None = None) -> PassageIndex:
        """Embed what is missing and keep the index with its vectors; the opened index."""

        checkpoint = self._checkpoint

        def heard(stage: str, done: int, of: int) -> None:
            if self._cancelled.is_set():
                raise EmbeddingCancelled
            self.done = done
            checkpoint.tick()
            if progress is not None:
                progress(done, of)

        batch = min(self._embedder.batch_size, BACKGROUND_BATCH)
        try:
            add_vectors(
                self._arrays,
                self._content,
                self._embedder,
                self._reuse,
                heard,
                self._texts,
                batch,
                checkpoint.new,
            )
        except BaseException:
            checkpoint.keep()
            raise
        return _kept(self._arrays, self._content, self._path, self._corpus)
