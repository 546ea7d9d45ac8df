"""One thread that runs blocking calls in order and hands each result back to the event loop.

The SQLite store's calls run here, one batch at a time on the thread that owns the connection.
It is a few lines more than `anyio.to_thread.run_sync` with a capacity limiter of one, and it
was kept because a hand-over costs less: side by side under load (wrk, a 2026-07-28 turn with
history over 64 conversations), Anvil took about 324 µs of CPU per call with this worker against
about 367 µs through anyio's thread pool with 2 connections, where nearly every call is a batch
of its own; with 16 connections, where a batch holds about 16 calls, the two cost the same
(245 and 243 µs). anyio's limiter, cancel scope and thread hand-off run on every hand-over
(docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class Worker:
    """A daemon thread running submitted calls in order; `stop` lets it end after those queued."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.stopped = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(self, call: Callable[[], _T]) -> asyncio.Future[_T]:
        """Queue `call`; the future settles on the caller's loop with its result or exception.

        Cancelling the future does not stop a call already running: calls never overlap.
        """
        if self.stopped:
            raise RuntimeError("the worker thread has stopped")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._jobs.put((loop, future, call))
        return future

    def stop(self) -> None:
        """Let the thread end once the calls already queued are done."""
        if not self.stopped:
            self.stopped = True
            self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, call = job
            try:
                result = call()
            except BaseException as error:  # handed to the awaiting task, which re-raises it
                _settle(loop, future, future.set_exception, error)
            else:
                _settle(loop, future, future.set_result, result)


def _settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    settle: Callable[[Any], None],
    value: Any,
) -> None:
    def settle_unless_cancelled() -> None:
        if not future.cancelled():
            settle(value)

    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
        loop.call_soon_threadsafe(settle_unless_cancelled)
