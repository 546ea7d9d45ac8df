"""`within`: a blocking call awaited for a bounded time, in a daemon thread that nothing waits for
once the deadline has passed; what it returns late is handed to `abandoned`, never lost open."""

from __future__ import annotations

import threading

import anyio
import pytest

from app.knowledge.deadline import DeadlinePassed, within

pytestmark = pytest.mark.anyio


async def test_what_the_call_returns_or_raises_is_the_callers() -> None:
    assert await within(5, lambda: 42) == 42

    def fails() -> int:
        raise PermissionError(13, "Permission denied", "/srv/docs.anvilidx")

    with pytest.raises(PermissionError, match="Permission denied"):
        await within(5, fails)


async def test_a_call_that_does_not_return_is_given_up_and_what_it_returns_late_is_abandoned() -> None:
    release, returned = threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    late: list[str] = []

    def hangs() -> str:
        threads.append(threading.current_thread())
        release.wait()
        return "an opened index"

    def abandon(value: str) -> None:
        late.append(value)
        returned.set()

    with pytest.raises(DeadlinePassed, match=r"no answer within 0.1 s"):
        await within(0.1, hangs, abandoned=abandon)
    assert threads[0].daemon and threads[0].is_alive()  # not waited for, not even at exit
    release.set()
    await anyio.to_thread.run_sync(returned.wait)
    assert late == ["an opened index"]


async def test_a_cancelled_wait_abandons_the_call_too() -> None:
    release, returned = threading.Event(), threading.Event()
    late: list[str] = []

    def hangs() -> str:
        release.wait()
        return "an opened index"

    with anyio.CancelScope() as scope:
        scope.cancel()
        await within(60, hangs, abandoned=lambda value: (late.append(value), returned.set()))
    release.set()
    await anyio.to_thread.run_sync(returned.wait)
    assert late == ["an opened index"]
