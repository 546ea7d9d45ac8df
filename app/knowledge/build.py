"""Building a knowledge index from folders (`anvil index`): the documents of each source read (a
folder, or blobs under a prefix; none larger than `ANVIL_MAX_DOCUMENT_BYTES`), their pages'
URLs, the index written with the vectors of the passages, reusing those of earlier indexes.

The index `anvil serve` builds of `ANVIL_CORPUS_DIR` at start-up, and keeps, is `corpus_cache`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy.typing as npt

from app.knowledge import resume
from app.knowledge.artifact import InvalidIndex
from app.knowledge.corpus import CorpusFile
from app.knowledge.corpus_files import parse_documents, read_corpus, too_large
from app.knowledge.index import PassageIndex, add_vectors, write_arrays
from app.knowledge.readers.documents import MAX_DOCUMENT_BYTES, SUFFIXES
from app.knowledge.resume import Checkpoint
from app.knowledge.sections import Progress, build_arrays, passage_texts
from app.knowledge.sites import SiteStyle, by_type, page_path, published_path, renamed, sniff, style_named
from app.knowledge.vectors import (
    PassageEmbedder,
    Vectors,
    reusable,
    seed_vectors,
    vector_key,
)
from app.private_files import describe

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
    """A folder of documents (a path, or a blob URL prefix), the site its pages are published at
    (None: cite paths), the size of the largest document read from it, and the style of the
    generator of its site (`sites.STYLES`; None: sniffed from the folder, else each document's
    type's)."""

    folder: Path | str
    site: str | None = None
    max_bytes: int = MAX_DOCUMENT_BYTES
    style: str | None = None

    @property
    def site_style(self) -> SiteStyle | None:
        """The style of its site: named, else sniffed (None: each document by its type)."""
        name = self.style or sniff(self.folder)
        return None if name is None else style_named(name)

    @property
    def name(self) -> str:
        """What its documents are named after when several sources are indexed together."""
        if isinstance(self.folder, str):
            return self.folder.rstrip("/").rsplit("/", 1)[-1]
        return self.folder.resolve().name or "corpus"


def read_source(source: Source, progress: Progress | None = None) -> list[CorpusFile]:
    """The documents of one source: a folder's files, or the blobs under a prefix (each read as
    its ending says, what cannot be read skipped with a warning naming it); `progress` hears
    ("reading", bytes read, bytes of them all)."""
    heard = None if progress is None else lambda done, of: progress("reading", done, of)
    if isinstance(source.folder, Path):
        return read_corpus(source.folder, heard, source.max_bytes)
    from app.knowledge.blob import read_documents

    prefix = source.folder if source.folder.endswith("/") else f"{source.folder}/"
    read = read_documents(
        prefix, SUFFIXES, max_bytes=source.max_bytes, too_large=lambda size: too_large(size, source.max_bytes)
    )
    return parse_documents(read, lambda name: f"{prefix}{name}", heard)


def page_url(
    site: str,
    path: str,
    published: str | None = None,
    style: SiteStyle | None = None,
    paths: Collection[str] = (),
    page_id: str | None = None,
) -> str:
    """Where the page of document `path` (relative to its folder; `paths` are all of them) is
    published under `site`: what its front matter says (an absolute `url` as it is, a `slug` or a
    relative `url` under the site), else where the generator of `style` writes it
    (`sites.page_path`; by default the path without its Markdown, reStructuredText or text
    ending, `guide/install.md` -> `SITE/guide/install`, a folder's `index` as the folder
    `guide/`, HTML as it is)."""
    if published is not None:
        if published.startswith(("http://", "https://")):
            return published
        return f"{site.rstrip('/')}/{published_path(style, path, published)}"
    return f"{site.rstrip('/')}/{page_path(style, renamed(style, path, page_id), paths)}"


def url_of(
    site: str | None, file: CorpusFile, style: SiteStyle | None = None, paths: Collection[str] = ()
) -> str | None:
    """The page URL of a document, when its folder names a site or its front matter an absolute URL."""
    if site is None:
        published = file.published
        return published if published and published.startswith(("http://", "https://")) else None
    return page_url(site, file.source, file.published, style, paths, file.page_id)


def read_sources(
    sources: Sequence[Source], progress: Progress | None = None
) -> tuple[list[CorpusFile], dict[str, str], dict[str, SiteStyle]]:
    """The documents of every folder, the page URL of each one whose folder names a site, and the
    site style each is anchored by (`sites`). With more than one folder, each document's source
    starts with its folder's name (`docs/intro.md`), so two folders' files never share a name."""
    names = [source.name for source in sources]
    if len(set(names)) < len(names):
        raise ValueError(
            "two source folders have the same name "
            f"({', '.join(sorted(n for n in set(names) if names.count(n) > 1))}): "
            "their documents would be cited alike; rename one, or index them one at a time"
        )
    files: list[CorpusFile] = []
    urls: dict[str, str] = {}
    styles: dict[str, SiteStyle] = {}
    for source, name in zip(sources, names, strict=True):
        read = read_source(source, progress)
        found, anchored = site_pages(read, source.site, source.site_style)
        prefix = "" if len(sources) == 1 else f"{name}/"
        files.extend(replace(file, source=f"{prefix}{file.source}") if prefix else file for file in read)
        urls.update({f"{prefix}{path}": url for path, url in found.items()})
        styles.update({f"{prefix}{path}": style for path, style in anchored.items()})
    return files, urls, styles


def site_pages(
    files: Sequence[CorpusFile], site: str | None, style: SiteStyle | None
) -> tuple[dict[str, str], dict[str, SiteStyle]]:
    """The page URL of each of a folder's `files` published under `site` (None: only those whose
    front matter gives an absolute URL), and the style each is anchored by: `style`, else its type's."""
    paths = frozenset(file.source for file in files)
    urls = {file.source: url for file in files if (url := url_of(site, file, style, paths))}
    return urls, {file.source: style or by_type(file.source) for file in files}


def build(
    sources: Sequence[Source],
    target: Path,
    progress: Progress | None = None,
    *,
    embedder: PassageEmbedder | None = None,
    previous: Sequence[Path] = (),
    knowledge: Mapping[str, str] | None = None,
) -> Built:
    """Index the documents of `sources` into the file `target` (written atomically; into a blob,
    `blob_build.build_to_blob`); with `embedder`, their passages' vectors too, reusing those
    of the indexes at `previous` (and of `target` itself, when it is there) for passages whose
    text they already embedded, and those an earlier build of `target` kept when it stopped early.
    `knowledge` is what the index says of itself (`name`, `description`), shown to whoever asks."""
    files, urls, styles = read_sources(sources, progress)
    described = [str(s.folder) if s.site is None else f"{s.folder}={s.site}" for s in sources]
    arrays, content = build_arrays(files, urls=urls, progress=progress, styles=styles)
    if knowledge:
        content["knowledge"] = dict(knowledge)
    embedded = None
    if embedder is not None:
        seeds = [s.folder for s in sources if isinstance(s.folder, Path)]
        embedded = _embed(arrays, content, embedder, [*previous, target], target, progress, seeds)
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
    seeds: Sequence[Path] = (),
) -> int:
    """Add the passages' vectors, reusing those of the source folders' seeds (`vectors.SEED`), of
    `previous` and those an earlier build of `target` kept before it stopped; what this one does
    is kept as it goes (`resume`)."""
    reuse = {key: vector for folder in seeds for key, vector in seed_vectors(folder).items()}
    reuse.update(vectors_of(previous))
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
