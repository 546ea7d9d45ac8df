"""Read a corpus folder: every document under it (`*.md`, `*.mdx`, `*.rst`, `*.html`, `*.htm`,
`*.txt`), each read by `formats.read_document` as its ending says.

Links are followed only while they stay inside the folder, and what cannot be read is skipped
with a warning naming it, so one bad file never stops start-up. A FIFO, socket or device named
like a document is skipped so too, without being opened, and so is a file larger than
`ANVIL_MAX_DOCUMENT_BYTES`, without being read.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from app.knowledge.corpus import CorpusFile
from app.knowledge.readers.documents import MAX_DOCUMENT_BYTES, SUFFIXES, UnreadableDocument, read_document
from app.knowledge.readers.markup import HEARD_EVERY, Heard, heard_as_bytes
from app.knowledge.regular_files import kind

logger = logging.getLogger(__name__)


def read_corpus(
    corpus_dir: Path,
    progress: Callable[[int, int], None] | None = None,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> list[CorpusFile]:
    """Every document under `corpus_dir` (a file with one of `formats.SUFFIXES`), in sorted path
    order.

    Sources are paths relative to `corpus_dir`, with forward slashes on every platform. Links
    (to files or folders) are followed while they stay inside `corpus_dir`: a file reached
    through one is a document under the link's path. A link out of the folder (or a broken one),
    a link back to a folder that holds it, a file that is not UTF-8 (a byte order mark is
    fine), a file larger than `max_bytes`, a document its parser rejects and a file or folder
    that cannot be read are each skipped with a warning naming them; the rest is read. A document
    read otherwise than it says (nested deeper than its reader's cap) is warned of once.

    Raises `NotADirectoryError` when `corpus_dir` is not a directory, so a misconfigured corpus
    fails loudly at start-up rather than answering from nothing. `progress` hears (bytes read,
    bytes found) as reading goes on, from inside a large document too.
    """
    return parse_corpus(corpus_dir, read_bytes(corpus_dir, max_bytes), progress)


def read_bytes(corpus_dir: Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> list[tuple[str, bytes]]:
    """(source, contents) of every file `read_corpus` reads, before any is parsed: what the
    start-up cache's key is made of, so that an unchanged folder is opened without parsing it.
    What cannot be read (or is larger than `max_bytes`) is skipped with a warning, as
    `read_corpus` says."""
    if not corpus_dir.is_dir():
        raise NotADirectoryError(f"The corpus directory {corpus_dir} does not exist or is not a directory.")
    root = corpus_dir.resolve()
    walked = sorted(_walk(root, root, (), (root,)))
    found = ((source, _read(root, source, real, max_bytes)) for source, real in walked)
    return [(source, data) for source, data in found if data is not None]


def documents_size(corpus_dir: Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> int:
    """How many bytes the files `read_bytes` reads under `corpus_dir` hold, from their sizes alone
    (nothing is opened, and nothing is warned of: reading them does that)."""
    root = corpus_dir.resolve()
    total = 0
    for _, real in _walk(root, root, (), (root,), lambda *_: None):
        try:
            size = os.stat(real).st_size
        except OSError:
            continue
        total += size if size <= max_bytes else 0
    return total


def parse_corpus(
    corpus_dir: Path, contents: list[tuple[str, bytes]], progress: Callable[[int, int], None] | None = None
) -> list[CorpusFile]:
    """The documents of `read_bytes(corpus_dir)`, each read as its ending says (see `read_corpus`)."""
    root = corpus_dir.resolve()
    return parse_documents(contents, lambda source: str(root / source), progress)


def parse_documents(
    contents: list[tuple[str, bytes]],
    where: Callable[[str], str],
    progress: Callable[[int, int], None] | None = None,
) -> list[CorpusFile]:
    """The documents of (source, bytes) `contents`, each read as its ending says (`document_of`,
    naming it by `where(source)`); `progress` hears (bytes read, bytes of them all)."""
    total = sum(len(data) for _, data in contents)
    files = []
    done = 0
    for source, data in contents:
        heard = None
        if progress is not None and len(data) >= HEARD_EVERY:
            heard = heard_as_bytes(lambda at: progress(at, total), done, len(data))
        files.append(document_of(data, source, where(source), heard))
        done += len(data)
        if progress is not None:
            progress(done, total)
    return [file for file in files if file is not None]


def _walk(
    root: Path,
    folder: Path,
    at: tuple[str, ...],
    holding: tuple[Path, ...],
    skip: Callable[[Path, str, str], None] | None = None,
) -> Iterator[tuple[str, Path]]:
    """(source, real path) of every corpus file in `folder` (reached as `at` from `root`) and below;
    what is passed over is told to `skip` (root, source, why), by default warned of.

    `holding` is the real path of every folder from `root` down to this one: a link to one of
    them would walk it again and again.
    """
    passed_over = skip or _skipped
    try:
        with os.scandir(folder) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError as error:
        if not at:
            raise OSError(
                f"cannot read the corpus folder {root} ({error.strerror or error}): give the user Anvil "
                "runs as read access to it, or set ANVIL_CORPUS_DIR to another folder"
            ) from None
        passed_over(root, "/".join(at), f"the folder cannot be read ({error.strerror or error})")
        return
    for entry in entries:
        names = (*at, entry.name)
        source = "/".join(names)
        try:
            linked = entry.is_symlink()
            is_dir = entry.is_dir()
        except OSError as error:
            why = (
                _LOOP if error.errno == errno.ELOOP else f"it cannot be looked at ({error.strerror or error})"
            )
            passed_over(root, source, why)
            continue
        if not is_dir and not entry.name.endswith(SUFFIXES):
            continue
        real = Path(entry.path)
        if linked:
            try:
                real = real.resolve()
            except (OSError, RuntimeError):  # RuntimeError: a loop of links, before Python 3.13
                passed_over(root, source, _LOOP)
                continue
            if not real.is_relative_to(root):
                passed_over(
                    root,
                    source,
                    f"it is a link to {real}, outside the corpus folder; only links inside it are followed",
                )
                continue
            if not real.exists():
                passed_over(root, source, f"it is a link to {real}, which does not exist")
                continue
            if real in holding:
                passed_over(root, source, f"it is a link to {real}, a folder that holds the link")
                continue
        if is_dir:
            yield from _walk(root, real, names, (*holding, real), passed_over)
            continue
        try:
            found = kind(os.stat(real).st_mode)
        except OSError as error:
            passed_over(root, source, f"it cannot be looked at ({error.strerror or error})")
            continue
        if found is not None:  # looked at, never opened: a FIFO would be waited on for ever
            passed_over(root, source, f"it is {found}, not a file; only files are read")
            continue
        yield source, real


def _read(root: Path, source: str, real: Path, max_bytes: int) -> bytes | None:
    """The bytes of corpus file `source`, read from `real`; None, with a warning, when they cannot
    be or there are more than `max_bytes` of them."""
    try:
        # No link is followed here any more: `real` was resolved and checked to be in the corpus.
        # O_NONBLOCK: a FIFO put in the place of a document since it was looked at would otherwise
        # block the start-up on open.
        flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
        descriptor = os.open(real, flags | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as file:
            status = os.fstat(file.fileno())
            if not stat.S_ISREG(status.st_mode):
                _skipped(root, source, "it is not a regular file")
                return None
            if status.st_size > max_bytes:
                _skipped(root, source, too_large(status.st_size, max_bytes))
                return None
            data = file.read(max_bytes + 1)
            if len(data) > max_bytes:  # grown since it was looked at
                _skipped(root, source, too_large(len(data), max_bytes))
                return None
    except OSError as error:
        _skipped(root, source, f"it cannot be read ({error.strerror or error})")
        return None
    return data


def document_of(data: bytes, source: str, where: str, heard: Heard | None = None) -> CorpusFile | None:
    """The document `source` from its bytes, read as its ending says (`heard` hears the share of
    it read); None, with a warning naming `where` it was read from (a path, a blob URL), when it
    is not UTF-8 or its parser rejects it. What its reader reads otherwise than it says is warned
    of, naming it too."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        _warn(
            where,
            f"it is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}): "
            "save it as UTF-8 to have it read",
        )
        return None
    try:
        # As text mode reads it: every line ends with "\n".
        return read_document(
            text.replace("\r\n", "\n").replace("\r", "\n"),
            source,
            heard=heard,
            warn=lambda why: logger.warning("corpus: %s: %s", where, why),
        )
    except UnreadableDocument as error:
        _warn(where, str(error))
        return None


_LOOP = "it is a link that leads nowhere (a loop of links)"


def _skipped(root: Path, source: str, why: str) -> None:
    _warn(str(root / source), why)


def _warn(where: str, why: str) -> None:
    logger.warning("corpus: skipped %s: %s", where, why)


def too_large(size: int, max_bytes: int) -> str:
    """Why a document of `size` bytes is not read."""
    return (
        f"it is {size / 1e6:.1f} MB, more than ANVIL_MAX_DOCUMENT_BYTES ({max_bytes / 1e6:.1f} MB): "
        "split it, or raise ANVIL_MAX_DOCUMENT_BYTES"
    )
