"""Building a knowledge index from folders (`anvil index`), and the start-up cache of one.

Without `ANVIL_INDEX`, `anvil serve` indexes `ANVIL_CORPUS_DIR` as before, but keeps the index in
the data folder under the corpus's content hash (of the files' paths and bytes, read but not
parsed): a restart over an unchanged folder opens it without parsing a document, and a changed
file (or another version of Anvil) gives another hash, so the index is built anew and the old
one removed.

With an embedder, the key names it too, and the passages' vectors go into the kept index. Those
take long to compute on a CPU (seconds for a page), so a first start over a new corpus serves
its lexical index at once and embeds in the background (`PendingVectors`); the index with vectors
replaces it when done. Vectors of an earlier index kept there are reused by key, so a changed
file costs the embeddings of its changed passages only.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy.typing as npt

from app import __version__
from app.knowledge import resume
from app.knowledge.artifact import FORMAT, InvalidIndex
from app.knowledge.corpus import CorpusFile
from app.knowledge.corpus_files import document_of, parse_corpus, read_bytes, read_corpus
from app.knowledge.index import (
    LEXICAL,
    PassageIndex,
    Progress,
    add_vectors,
    build_arrays,
    passage_texts,
    write_arrays,
)
from app.knowledge.readers.documents import SUFFIXES
from app.knowledge.resume import Checkpoint
from app.knowledge.vectors import (
    PassageEmbedder,
    Vectors,
    reusable,
    vector_key,
)
from app.private_files import PRIVATE_FILE, describe, private_folder

logger = logging.getLogger(__name__)

#: The file name ending of an index.
SUFFIX = ".anvilidx"


@dataclass(frozen=True)
class Built:
    """What `build` wrote: its version and counts."""

    version: str
    files: int
    passages: int
    bytes: int
    #: How many passages were embedded (the others' vectors were reused); None without an embedder.
    embedded: int | None = None


@dataclass(frozen=True)
class Source:
    """A folder of documents (a path, or a blob URL prefix), and the site its pages are published
    at (None: cite paths)."""

    folder: Path | str
    site: str | None = None

    @property
    def name(self) -> str:
        """What its documents are named after when several sources are indexed together."""
        if isinstance(self.folder, str):
            return self.folder.rstrip("/").rsplit("/", 1)[-1]
        return self.folder.resolve().name or "corpus"


def read_source(source: Source, progress: Progress | None = None) -> list[CorpusFile]:
    """The documents of one source: a folder's files, or the blobs under a prefix (each read as
    its ending says, what cannot be read skipped with a warning naming it)."""
    if isinstance(source.folder, Path):
        return read_corpus(
            source.folder, None if progress is None else lambda n, of: progress("reading", n, of)
        )
    from app.knowledge.blob import read_documents

    prefix = source.folder if source.folder.endswith("/") else f"{source.folder}/"
    found = (document_of(data, name, f"{prefix}{name}") for name, data in read_documents(prefix, SUFFIXES))
    return [document for document in found if document is not None]


def page_url(site: str, path: str, published: str | None = None) -> str:
    """Where the page of document `path` (relative to its folder) is published under `site`: what
    its front matter says (an absolute `url` as it is, a `slug` or a relative `url` under the
    site), else the path without its Markdown, reStructuredText or text ending
    (`guide/install.md` -> `SITE/guide/install`), a folder's `index` as the folder (`guide/`),
    HTML as it is."""
    if published is not None:
        if published.startswith(("http://", "https://")):
            return published
        return f"{site.rstrip('/')}/{published.lstrip('/')}"
    stem, dot, ending = path.rpartition(".")
    if dot and ending in ("md", "mdx", "rst", "txt"):
        path = stem
        if path == "index" or path.endswith("/index"):
            path = path[: -len("index")]
    return f"{site.rstrip('/')}/{path}"


def _url_of(site: str | None, path: str, published: str | None) -> str | None:
    """The page URL of a document, when its folder names a site or its front matter an absolute URL."""
    if site is None:
        return published if published and published.startswith(("http://", "https://")) else None
    return page_url(site, path, published)


def read_sources(
    sources: Sequence[Source], progress: Progress | None = None
) -> tuple[list[CorpusFile], dict[str, str]]:
    """The documents of every folder, and the page URL of each one whose folder names a site.
    With more than one folder, each document's source starts with its folder's name
    (`docs/intro.md`), so two folders' files never share a name."""
    if len(sources) == 1:
        read = read_source(sources[0], progress)
        site = sources[0].site
        return read, {f.source: url for f in read if (url := _url_of(site, f.source, f.published))}
    names = [source.name for source in sources]
    if len(set(names)) < len(names):
        raise ValueError(
            "two source folders have the same name "
            f"({', '.join(sorted(n for n in set(names) if names.count(n) > 1))}): "
            "their documents would be cited alike; rename one, or index them one at a time"
        )
    files: list[CorpusFile] = []
    urls: dict[str, str] = {}
    for source, name in zip(sources, names, strict=True):
        for file in read_source(source, progress):
            named = CorpusFile(
                source=f"{name}/{file.source}", title=file.title, text=file.text, published=file.published
            )
            files.append(named)
            if url := _url_of(source.site, file.source, file.published):
                urls[named.source] = url
    return files, urls


def build(
    sources: Sequence[Source],
    target: Path,
    progress: Progress | None = None,
    *,
    embedder: PassageEmbedder | None = None,
    previous: Sequence[Path] = (),
) -> Built:
    """Index the documents of `sources` into the file `target` (written atomically; into a blob,
    `blob_build.build_to_blob`); with `embedder`, their passages' vectors too, reusing those
    of the indexes at `previous` (and of `target` itself, when it is there) for passages whose
    text they already embedded, and those an earlier build of `target` kept when it stopped early."""
    files, urls = read_sources(sources, progress)
    described = [str(s.folder) if s.site is None else f"{s.folder}={s.site}" for s in sources]
    arrays, content = build_arrays(files, urls=urls, progress=progress)
    embedded = None
    if embedder is not None:
        embedded = _embed(arrays, content, embedder, [*previous, target], target, progress)
    try:
        version = write_arrays(arrays, content, target, sources=described)
    except OSError as error:
        raise OSError(
            f"{describe(error, 'write the index', target)}: free space or allow writing there, or write "
            "the index elsewhere"
        ) from None
    if embedder is not None:
        resume.partial_path(target).unlink(missing_ok=True)
    return Built(version, len(files), int(content["passages"]), target.stat().st_size, embedded)


def _embed(
    arrays: dict[str, npt.NDArray[Any]],
    content: dict[str, Any],
    embedder: PassageEmbedder,
    previous: Sequence[Path],
    target: Path,
    progress: Progress | None,
) -> int:
    """Add the passages' vectors, reusing those of `previous` and those an earlier build of
    `target` kept before it stopped; what this one does is kept as it goes (`resume`)."""
    reuse = vectors_of(previous)
    reuse.update(resume.so_far(target))
    texts = passage_texts(arrays)
    checkpoint = Checkpoint(target, embedder.name, [vector_key(embedder.name, t) for t in texts], reuse)

    def heard(stage: str, done: int, of: int) -> None:
        checkpoint.tick()
        if progress is not None:
            progress(stage, done, of)

    try:
        return add_vectors(arrays, content, embedder, reuse, heard, texts, into=checkpoint.new)
    except BaseException:
        checkpoint.keep()
        raise


def vectors_of(paths: Sequence[Path]) -> dict[bytes, Vectors]:
    """The passage vectors of the indexes at `paths` by key (those that cannot be read add none)."""
    found: dict[bytes, Vectors] = {}
    for path in paths:
        if not path.is_file():
            continue
        try:
            index = PassageIndex.open(path)
        except (InvalidIndex, OSError) as error:
            logger.info("index: no vectors reused from %s (%s)", path, error)
            continue
        # Copied out: the file is closed (and may be replaced) before they are used.
        found.update(
            {
                key: vector.copy()
                for key, vector in reusable(index.embedder, index.vectors, index.vector_keys).items()
            }
        )
        index.close()
    return found


def corpus_key(
    contents: Sequence[tuple[str, bytes]], site: str | None = None, embedder: str | None = None
) -> str:
    """A hash of the files an index is built from (each path and its bytes), of the site they are
    published at, of the embedder of their vectors, and of the version of Anvil that indexes them."""
    digest = hashlib.sha256(f"{__version__}\0{FORMAT}\0{LEXICAL}\0{site or ''}\0{embedder or ''}\0".encode())
    for source, data in contents:
        encoded = source.encode()
        digest.update(len(encoded).to_bytes(8, "little") + encoded + len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:32]


def index_folder(
    corpus_dir: Path,
    cache_dir: Path | None = None,
    site: str | None = None,
    embedder: PassageEmbedder | None = None,
) -> PassageIndex:
    """The index of every document under `corpus_dir`, its vectors computed before it returns
    (blocking): in memory, or kept in `cache_dir` and opened from it while the folder is unchanged
    (`open_cached`), its pages published under `site`."""
    if cache_dir is not None:
        index, pending = open_cached(corpus_dir, cache_dir, site, embedder)
        return index if pending is None else pending.run()
    files = read_corpus(corpus_dir)
    urls = {f.source: url for f in files if (url := _url_of(site, f.source, f.published))}
    arrays, content = build_arrays(files, urls=urls)
    if embedder is not None:
        add_vectors(arrays, content, embedder)
    return PassageIndex.of_arrays(arrays, content)


def open_cached(
    corpus_dir: Path, cache_dir: Path, site: str | None = None, embedder: PassageEmbedder | None = None
) -> tuple[PassageIndex, PendingVectors | None]:
    """The index of `corpus_dir` (its pages published under `site`, if given; its passages
    embedded by `embedder`, if given), opened from `cache_dir` if built before, else built and
    kept there; built in memory only when the cache cannot be written (with a warning saying
    why). While passages still need vectors, the index returned is lexical, and the vectors are
    left to the `PendingVectors` returned with it."""
    contents = read_bytes(corpus_dir)
    path = cache_dir / f"{corpus_key(contents, site, None if embedder is None else embedder.name)}{SUFFIX}"
    if path.is_file():
        try:
            return PassageIndex.open(path), None
        except InvalidIndex as error:
            logger.warning("corpus: the cached index cannot be served (%s); building it again", error)
    files = parse_corpus(corpus_dir, contents)
    urls = {f.source: url for f in files if (url := _url_of(site, f.source, f.published))}
    arrays, content = build_arrays(files, urls=urls)
    if embedder is not None:
        earlier = sorted(p for p in cache_dir.glob(f"*{SUFFIX}") if p != path) if cache_dir.is_dir() else []
        reuse = vectors_of(earlier)
        reuse.update(resume.so_far(path))
        pending = PendingVectors(arrays, content, embedder, reuse, path, str(corpus_dir))
        if pending.missing:
            return PassageIndex.of_arrays(arrays, content), pending
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
