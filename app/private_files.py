"""Folders and files only their owner can open: what Anvil writes in its data folder, and the
sign-in token cache.

A folder is created 0700 and a file 0600, and the mode is set again right after, so that no
umask widens or narrows it. An existing folder or file keeps its mode (its owner may have chosen
it); `warn_if_open` names one that other users can open, and the `chmod` that closes it. On
Windows, where modes say little, folders and files take the ACLs they inherit.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat
import threading
from pathlib import Path

PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600

logger = logging.getLogger(__name__)

_POSIX = os.name == "posix"

# The data folder is checked by each part that keeps something in it (the store, the dev key):
# one warning per path is enough.
_warned: set[str] = set()
_warned_lock = threading.Lock()


def private_folder(path: Path) -> None:
    """Create the folder `path` and its missing parents, each 0700; an existing one is left as it is.

    Raises the `OSError` of the first folder that cannot be created: `FileExistsError` when a
    file stands where a folder should be (see `describe`).
    """
    missing: list[Path] = []
    folder = path
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_FOLDER)
        except FileExistsError:
            if folder.is_dir():
                continue  # another process created it meanwhile, with a mode of its own choosing
            raise
        if _POSIX:
            os.chmod(folder, PRIVATE_FOLDER)


def private_file(path: Path, *, narrow: bool = False) -> bool:
    """Create `path` as an empty 0600 file unless it exists (its missing folders 0700, see
    `private_folder`); whether it was created. With `narrow`, an existing file is set to 0600 too."""
    private_folder(path.parent)
    # O_EXCL: an existing file (or a link planted in its place) is never opened, only reported.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags, PRIVATE_FILE)
    except FileExistsError:
        if narrow and _POSIX:
            os.chmod(path, PRIVATE_FILE)
        return False
    try:
        if _POSIX:
            os.fchmod(descriptor, PRIVATE_FILE)
    finally:
        os.close(descriptor)
    return True


def describe(error: OSError, action: str, path: Path) -> str:
    """`error` of `private_folder` or `private_file` in words, where `action` names what was done
    to `path`: "cannot create the data folder /x/y: permission denied". An error about another
    path (a parent folder) names it too; a file standing where a folder should be says so."""
    failed = Path(os.fsdecode(error.filename)) if error.filename is not None else path
    if isinstance(error, FileExistsError):
        cause = "a file is in its place" if failed == path else f"{failed} is a file, not a folder"
    else:
        cause = reason(error) if failed == path else f"creating {failed}: {reason(error)}"
    return f"cannot {action} {path}: {cause}"


def reason(error: OSError) -> str:
    """The cause of `error` in lower-case words: "permission denied", "read-only file system"."""
    text = error.strerror or str(error) or type(error).__name__
    return text[:1].lower() + text[1:]


def warn_if_open(*paths: Path) -> None:
    """Log a warning for each existing folder or file of `paths` that users other than its owner
    may read, write or search (any group or other bit), with the `chmod` that makes it private.

    A path that is missing or cannot be looked at is passed over: opening it says why. Each path
    is named once per process.
    """
    if not _POSIX:
        return
    for path in paths:
        try:
            status = path.stat()
        except OSError:
            continue
        mode = stat.S_IMODE(status.st_mode)
        if not mode & 0o077:
            continue
        with _warned_lock:
            if str(path) in _warned:
                continue
            _warned.add(str(path))
        folder = stat.S_ISDIR(status.st_mode)
        kind = "folder" if folder else "file"
        private = PRIVATE_FOLDER if folder else PRIVATE_FILE
        logger.warning(
            "the %s %s can be %s by other users (mode %04o): run `chmod %o %s` so that only its owner can",
            kind,
            path,
            _what_others_may(mode, folder=folder),
            mode,
            private,
            shlex.quote(str(path)),
        )


def _what_others_may(mode: int, *, folder: bool) -> str:
    done = [word for bits, word in ((0o044, "read"), (0o022, "written")) if mode & bits]
    if not done:
        done = ["searched" if folder else "run"]
    return " and ".join(done)
