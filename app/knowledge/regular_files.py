"""Files that are read only when they are regular files: a FIFO, a socket or a device where an
index or a document is expected is refused without being opened. Opening a FIFO waits for a
writer for ever (a thread that never returns, a start-up that never ends); opening a device may
act on it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotARegularFile(OSError):
    """A path that names something other than a regular file; the message says what it is."""


def kind(mode: int) -> str | None:
    """What a file of `mode` is, in words ("a FIFO (named pipe)"); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path | str) -> BinaryIO:
    """`path` opened for reading, when it is a regular file (links followed); `NotARegularFile`
    saying what it is otherwise, before anything is opened."""
    found = kind(os.stat(path).st_mode)
    if found is not None:
        raise NotARegularFile(f"{path} is {found}, not a file")
    # O_NONBLOCK: a FIFO put in its place since it was looked at opens at once rather than
    # waiting for a writer, and is refused here.
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        found = kind(os.fstat(descriptor).st_mode)
        if found is not None:
            raise NotARegularFile(f"{path} is {found}, not a file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise
