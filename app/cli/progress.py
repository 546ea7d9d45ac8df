"""What `anvil index` says while it builds: on a terminal one line, rewritten in place, with how
far each stage is and the time it has left; elsewhere (CI, a log) one plain line as each stage
ends, so a log holds no carriage returns."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

#: Each stage's words: what is counted, and the verb for a finished one.
_STAGES = {
    "reading": ("files read", "read {of:,} files"),
    "cutting": ("files cut into passages", "cut {of:,} files into passages"),
    "indexing": ("passages indexed", "indexed {of:,} passages"),
    "embedding": ("passages embedded", "embedded {of:,} passages"),
}
#: Off a terminal, a stage still going after this long says how far it is, this often.
_LOG_EVERY = 60.0


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
        counted, finished = _STAGES.get(stage, (stage, stage + " {of:,}"))
        if done >= of:
            line = f"anvil: {finished.format(of=of)} in {now - self._began:.1f} s"
            self._stream.write(f"\r\x1b[K{line}\n" if self._terminal else f"{line}\n")
        elif self._terminal and now - self._shown >= 0.1:
            self._shown = now
            self._stream.write(f"\r\x1b[K{self._line(done, of, counted, now)}")
        elif not self._terminal and now - max(self._shown, self._began) >= _LOG_EVERY:
            self._shown = now
            self._stream.write(f"{self._line(done, of, counted, now)}\n")
        self._stream.flush()

    def _line(self, done: int, of: int, counted: str, now: float) -> str:
        left = (now - self._began) / max(done, 1) * (of - done)
        return f"anvil: {done:,} of {of:,} {counted}, about {left:.0f} s left"
