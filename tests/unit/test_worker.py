"""The store's worker thread: calls in order, results and errors back on the loop, a clean stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from app.stores.worker import Worker

pytestmark = pytest.mark.anyio


@pytest.fixture
def worker() -> Iterator[Worker]:
    running = Worker("test-worker")
    yield running
    running.stop()


async def test_results_and_errors_come_back_to_the_caller(worker: Worker) -> None:
    assert await worker.run(lambda: threading.current_thread().name) == "test-worker"

    def fail() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        await worker.run(fail)


async def test_calls_run_one_at_a_time_in_the_order_they_were_asked(worker: Worker) -> None:
    order: list[int] = []
    running = threading.Lock()

    def call(n: int) -> int:
        assert running.acquire(blocking=False), "two calls at once"
        try:
            order.append(n)
            return n
        finally:
            running.release()

    results = await asyncio.gather(*(worker.run(lambda n=n: call(n)) for n in range(50)))
    assert results == order == list(range(50))


async def test_a_cancelled_caller_does_not_stop_its_call_or_the_next(worker: Worker) -> None:
    release = threading.Event()
    done: list[str] = []

    def slow() -> None:
        release.wait(5)
        done.append("slow")

    pending = worker.run(slow)
    pending.cancel()
    after = worker.run(lambda: done.append("after"))
    release.set()
    await after
    assert done == ["slow", "after"]


async def test_a_stopped_worker_refuses_calls_and_its_thread_ends() -> None:
    worker = Worker("stopping")
    await worker.run(lambda: None)
    worker.stop()
    worker.stop()  # twice is harmless
    with pytest.raises(RuntimeError, match="stopped"):
        worker.run(lambda: None)
    await asyncio.to_thread(worker._thread.join, 5)
    assert not worker._thread.is_alive()
