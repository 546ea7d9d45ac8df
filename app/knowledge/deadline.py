"""A blocking call (opening a file, downloading a blob) awaited for a bounded time.

`within(seconds, call)` runs `call` in a daemon thread of its own and waits for it at most
`seconds`; past that (or when the waiting task is cancelled, at shutdown) the caller goes on and
the thread is left to return, or not, on its own: what it returns late is handed to `abandoned`
(an index to close), never to the caller. A call blocked for ever (a read from a hung network
share, a connection that never answers) then holds neither the refresh loop, nor the start-up,
nor the process's exit: a daemon thread is not waited for when the interpreter ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

T = TypeVar("T")


class DeadlinePassed(TimeoutError):
    """The call did not return in time (it may still, in its own thread)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g} s")


class _Outcome(Generic[T]):
    """What the call gave, and whether anyone still waits for it (both read and written in the
    event loop's thread only, so the two sides never race)."""

    def __init__(self) -> None:
        self.value: T | None = None
        self.error: BaseException | None = None
        self.done = anyio.Event()
        self.given_up = False


async def within(
    seconds: float,
    call: Callable[[], T],
    *,
    abandoned: Callable[[T], object] = lambda _: None,
    name: str = "anvil-blocking",
) -> T:
    """What `call()` returns (or raises), once it has; `TimeoutError` when it has not after
    `seconds` (`DeadlinePassed`; see the module)."""
    outcome: _Outcome[T] = _Outcome()
    token = anyio.lowlevel.current_token()

    def late() -> None:
        if outcome.error is None:
            abandoned(outcome.value)  # type: ignore[arg-type]

    def deliver() -> None:  # in the event loop's thread
        if outcome.given_up:
            late()
        else:
            outcome.done.set()

    def run() -> None:
        try:
            outcome.value = call()
        except BaseException as error:  # handed to the waiting task, which raises it
            outcome.error = error
        try:
            anyio.from_thread.run_sync(deliver, token=token)
        except Exception:  # the event loop has ended since: nobody waits any more
            late()

    threading.Thread(target=run, name=name, daemon=True).start()
    try:
        with anyio.fail_after(seconds):
            await outcome.done.wait()
    except BaseException as error:
        outcome.given_up = True
        if outcome.done.is_set():  # delivered just as the wait ended
            late()
        if isinstance(error, TimeoutError):
            raise DeadlinePassed(seconds) from None
        raise
    if outcome.error is not None:
        raise outcome.error
    return outcome.value  # type: ignore[return-value]
