"""Where `anvil index` writes, checked before it reads a single source: a build that cannot be
written is refused in a second, in one line saying what to change, not after its documents are
read and its passages embedded.

A file is written into its folder (a temporary file renamed over the target), so the folder
(or, while it does not exist yet, the nearest folder above it) must take a new file, which is
tried for real, and must have room for at least the documents' own size (the index holds their
text, and more). A blob is built in a scratch folder, which must have that room, and uploaded:
its container must exist and the identity must be allowed to write there, which staging one
block that is never committed tells without changing the blob (`blob.check_writable`).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from app.knowledge.build import Source
from app.knowledge.corpus_files import documents_size
from app.knowledge.readers.documents import SUFFIXES
from app.private_files import reason


class UnwritableTarget(OSError):
    """The index cannot be written where asked; the message says why and what to change."""


def check_target(target: Path | str, sources: Sequence[Source]) -> None:
    """`UnwritableTarget` (or the storage's own `BlobStorageError`) unless an index of `sources`
    can be written at `target`, a file path or a blob URL (see the module)."""
    needed = sum(_size(source) for source in sources)
    if isinstance(target, str):
        from app.knowledge.blob import check_writable

        scratch = Path(tempfile.gettempdir())
        _check_room(
            scratch, needed, f"build the index of {target} in", "set TMPDIR to a folder on a larger disk"
        )
        check_writable(target)
        return
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UnwritableTarget(
            f"cannot write {target}: {folder} is a file, not a folder: give another --output"
        )
    _check_writes(folder, target)
    _check_room(folder, needed, f"write {target} in", "give --output on another disk")


def _size(source: Source) -> int:
    if isinstance(source.folder, Path):
        return documents_size(source.folder, source.max_bytes)
    from app.knowledge.blob import documents_size as blobs_size

    prefix = source.folder if source.folder.endswith("/") else f"{source.folder}/"
    return blobs_size(prefix, SUFFIXES, source.max_bytes)


def _check_writes(folder: Path, target: Path) -> None:
    """Create (and remove) a file in `folder` as the index's own temporary file would be."""
    try:
        handle, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".check", dir=folder)
    except OSError as error:
        if error.errno == errno.EROFS:
            why = f"{folder} is on a read-only file system: give --output on a writable one"
        elif error.errno in (errno.EACCES, errno.EPERM):
            why = (
                f"this user may not create files in {folder} ({reason(error)}): give --output in a "
                "folder you can write, or make that one writable"
            )
        elif error.errno == errno.ENOSPC:
            why = f"{folder} has no space left: free some, or give --output on another disk"
        else:
            why = f"a file cannot be created in {folder} ({reason(error)}): give another --output"
        raise UnwritableTarget(f"cannot write {target}: {why}") from None
    os.close(handle)
    os.unlink(probe)


def _check_room(folder: Path, needed: int, action: str, advice: str) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise UnwritableTarget(
            f"cannot {action} {folder}: it has {_megabytes(free)} free, less than the "
            f"{_megabytes(needed)} of the documents to index: free some space there, or {advice}"
        )


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
