"""Read a corpus folder: every document under it (`*.md`, `*.mdx`, `*.rst`, `*.html`, `*.htm`,
`*.txt`), each read by `formats.read_document` as its ending says.

Links are followed only while they stay inside the folder, and what cannot be read is skipped
with a warning naming it, so one bad file never stops start-up. A FIFO, socket or device named
like a document is skipped so too, without being opened.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from app.knowledge.corpus import CorpusFile
from app.knowledge.readers.documents import SUFFIXES, UnreadableDocument, read_document
from app.knowledge.regular_files import kind

logger = logging.getLogger(__name__)


def read_corpus(corpus_dir: Path, progress: Callable[[int, int], None] | None = None) -> list[CorpusFile]:
    """Every document under `corpus_dir` (a file with one of `formats.SUFFIXES`), in sorted path
    order.

    Sources are paths relative to `corpus_dir`, with forward slashes on every platform. Links
    (to files or folders) are followed while they stay inside `corpus_dir`: a file reached
    through one is a document under the link's path. A link out of the folder (or a broken one),
    a link back to a folder that holds it, a file that is not UTF-8 (a byte order mark is
    fine), a document its parser rejects and a file or folder that cannot be read are each
    skipped with a warning naming them; the rest is read.

    Raises `NotADirectoryError` when `corpus_dir` is not a directory, so a misconfigured corpus
    fails loudly at start-up rather than answering from nothing. `progress` hears (files read,
    files found) as reading goes on.
    """
    return parse_corpus(corpus_dir, read_bytes(corpus_dir), progress)


def read_bytes(corpus_dir: Path) -> list[tuple[str, bytes]]:
    """(source, contents) of every file `read_corpus` reads, before any is parsed: what the
    start-up cache's key is made of, so that an unchanged folder is opened without parsing it.
    What cannot be read is skipped with a warning, as `read_corpus` says."""
    if not corpus_dir.is_dir():
        raise NotADirectoryError(f"The corpus directory {corpus_dir} does not exist or is not a directory.")
    root = corpus_dir.resolve()
    found = ((source, _read(root, source, real)) for source, real in sorted(_walk(root, root, (), (root,))))
    return [(source, data) for source, data in found if data is not None]


def documents_size(corpus_dir: Path) -> int:
    """How many bytes the files `read_bytes` reads under `corpus_dir` hold, from their sizes alone
    (nothing is opened, and nothing is warned of: reading them does that)."""
    root = corpus_dir.resolve()
    total = 0
    for _, real in _walk(root, root, (), (root,), lambda *_: None):
        try:
            total += os.stat(real).st_size
        except OSError:
            continue
    return total


def parse_corpus(
    corpus_dir: Path, contents: list[tuple[str, bytes]], progress: Callable[[int, int], None] | None = None
) -> list[CorpusFile]:
    """The documents of `read_bytes(corpus_dir)`, each read as its ending says (see `read_corpus`)."""
    root = corpus_dir.resolve()
    files = []
    for number, (source, data) in enumerate(contents, start=1):
        files.append(document_of(data, source, str(root / source)))
        if progress is not None:
            progress(number, len(contents))
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


def _read(root: Path, source: str, real: Path) -> bytes | None:
    """The bytes of corpus file `source`, read from `real`; None, with a warning, when they cannot be."""
    try:
        # No link is followed here any more: `real` was resolved and checked to be in the corpus.
        # O_NONBLOCK: a FIFO put in the place of a document since it was looked at would otherwise
        # block the start-up on open.
        flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
        descriptor = os.open(real, flags | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                _skipped(root, source, "it is not a regular file")
                return None
            data = file.read()
    except OSError as error:
        _skipped(root, source, f"it cannot be read ({error.strerror or error})")
        return None
    return data


def document_of(data: bytes, source: str, where: str) -> CorpusFile | None:
    """The document `source` from its bytes, read as its ending says; None, with a warning naming
    `where` it was read from (a path, a blob URL), when it is not UTF-8 or its parser rejects it."""
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
        return read_document(text.replace("\r\n", "\n").replace("\r", "\n"), source)
    except UnreadableDocument as error:
        _warn(where, str(error))
        return None


_LOOP = "it is a link that leads nowhere (a loop of links)"


def _skipped(root: Path, source: str, why: str) -> None:
    _warn(str(root / source), why)


def _warn(where: str, why: str) -> None:
    logger.warning("corpus: skipped %s: %s", where, why)
