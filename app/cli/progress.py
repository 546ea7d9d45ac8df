"""What `anvil index` says while it builds: on a terminal one line, rewritten in place, with how
far each stage is and the time it has left; elsewhere (CI, a log) one plain line as each stage
ends, so a log holds no carriage returns. Reading and cutting are counted in bytes of the
documents, so a large document shows its progress too; indexing and embedding in passages."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

#: Each stage's words: what is counted (one, many), what becomes of them, and the verb for a
#: finished stage.
_STAGES = {
    "reading": ("byte", "read", "read {count}"),
    "cutting": ("byte", "cut into passages", "cut {count} into passages"),
    "indexing": ("passage", "indexed", "indexed {count}"),
    "embedding": ("passage", "embedded", "embedded {count}"),
}
#: Off a terminal, a stage still going after this long says how far it is, this often.
_LOG_EVERY = 60.0
#: The time left is said once a stage has gone on this long with something done: before, the
#: rate it would be estimated from says nothing.
_ESTIMATE_AFTER = 2.0


def _so_far(done: int, of: int, noun: str) -> str:
    """`2 of 4 files`; bytes in the unit of the whole, `1.2 of 4.0 MB`."""
    if noun != "byte":
        return f"{done:,} of {counted(of, noun)}"
    unit, scale = ("kB", 1e3) if of < 1e6 else ("MB", 1e6)
    return f"{done / scale:.1f} of {of / scale:.1f} {unit}"


def counted(count: int, noun: str) -> str:
    """`1 file`, `2,048 files`; bytes as `41.0 kB`, `3.2 MB`."""
    if noun == "byte":
        return f"{count / 1e3:.1f} kB" if count < 1e6 else f"{count / 1e6:.1f} MB"
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


class IndexProgress:
    """Hears (stage, done, of) from the index build and tells `stream` (see the module)."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._terminal = stream.isatty()
        self._stage: str | None = None
        self._began = 0.0
        self._shown = 0.0

    def __call__(self, stage: str, done: int, of: int) -> None:
        now = self._clock()
        if stage != self._stage:
            self._stage, self._began, self._shown = stage, now, 0.0
        noun, become, finished = _STAGES.get(stage, ("item", stage, stage + " {count}"))
        if done >= of:
            line = f"anvil: {finished.format(count=counted(of, noun))} in {now - self._began:.1f} s"
            self._stream.write(f"\r\x1b[K{line}\n" if self._terminal else f"{line}\n")
        elif self._terminal and now - self._shown >= 0.1:
            self._shown = now
            self._stream.write(f"\r\x1b[K{self._line(done, of, noun, become, now)}")
        elif not self._terminal and now - max(self._shown, self._began) >= _LOG_EVERY:
            self._shown = now
            self._stream.write(f"{self._line(done, of, noun, become, now)}\n")
        self._stream.flush()

    def _line(self, done: int, of: int, noun: str, become: str, now: float) -> str:
        line = f"anvil: {_so_far(done, of, noun)} {become}"
        elapsed = now - self._began
        if done and elapsed >= _ESTIMATE_AFTER:
            line += f", about {elapsed / done * (of - done):.0f} s left"
        return line
