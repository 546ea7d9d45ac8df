"""The SQLite store's one thread, which owns its one connection, and the batches it runs.

The stdlib `sqlite3` module blocks, so every call runs on this thread, in the order made. Calls
made while the thread is busy (or in the same pass of the event loop) wait together and are
handed to it at once, and it runs the conversation writes among them in one transaction.

Why batches, not one hand-off and one commit per call: under load a turn then shares a thread
wake-up, the write lock, the commit and the pages every write touches (page 1, the two indexes)
with the turns waiting beside it (about 9 calls a batch at 16 connections). 16 tasks each
reading and writing a 50-turn conversation on one core: 560 µs of CPU a turn with one hand-off
per call and one transaction per write, 450 batched; a 2026-07-28 turn with history through the
server (`bench/run.py`, 16 connections): 1.74x the bare SDK's CPU per call, 1.28x batched
(docs/performance.md).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

_T = TypeVar("_T")


class _Call(NamedTuple):
    """A call waiting for the thread, and the future its caller awaits on the event loop."""

    work: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    #: A conversation write: run in the batch's one transaction.
    write: bool


#: What a call came to on the thread: its result, or the exception it raised.
_Outcome = tuple[Any, BaseException | None]


class StoreThread:
    """Runs calls on one thread with `connection`, never two at once, batched (see the module).

    Everything but `_run_batch` runs on the event loop, so the waiting list needs no lock.
    """

    def __init__(self, thread: ThreadPoolExecutor, connection: sqlite3.Connection) -> None:
        self._thread = thread
        self.connection = connection
        self._waiting: list[_Call] = []
        # True from the hand-off of a batch until its outcomes are settled: calls made meanwhile
        # wait for the next batch, which is handed over as soon as this one is done.
        self._busy = False
        self.closed = False

    async def run(self, work: Callable[[sqlite3.Connection], _T], *, write: bool = False) -> _T:
        """`work`'s result, run on the thread with the connection; its exception, raised here.

        A caller cancelled while its call waits or runs does not stop it: the call runs to its
        end in its batch, and the next batch starts only after it.
        """
        if self.closed:
            raise RuntimeError("the SQLite conversation store is closed")
        result: _T = await self._queue(work, write)
        return result

    async def aclose(self) -> None:
        """Close the connection once the calls already made are done; later calls raise."""
        if self.closed:
            return
        self.closed = True
        closing = self._queue(lambda db: db.close(), False)
        # Once the connection is closed, even if this caller stopped waiting for it.
        closing.add_done_callback(lambda _: self._thread.shutdown(wait=False))
        await asyncio.shield(closing)

    def _queue(self, work: Callable[[sqlite3.Connection], Any], write: bool) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._waiting.append(_Call(work, future, write))
        if not self._busy:
            self._busy = True
            # At the end of this pass of the loop, so that calls made in the same pass go together.
            loop.call_soon(self._hand_over)
        return future

    def _hand_over(self) -> None:
        calls, self._waiting = self._waiting, []
        try:
            loop = asyncio.get_running_loop()
            done = loop.run_in_executor(self._thread, _run_batch, self.connection, calls)
        except RuntimeError as error:  # the thread has shut down: closed, and never reopened
            self._settle(calls, [(None, error)] * len(calls))
            return
        done.add_done_callback(lambda finished: self._settle(calls, finished.result()))

    def _settle(self, calls: list[_Call], outcomes: list[_Outcome]) -> None:
        for call, (result, error) in zip(calls, outcomes, strict=True):
            if call.future.cancelled():  # the caller stopped waiting
                continue
            if error is None:
                call.future.set_result(result)
            else:
                call.future.set_exception(error)
        if self._waiting:
            # Scheduled after the callers just answered, so the calls they make next join this batch.
            asyncio.get_running_loop().call_soon(self._hand_over)
        else:
            self._busy = False


def _run_batch(db: sqlite3.Connection, calls: list[_Call]) -> list[_Outcome]:
    """On the thread: the writes first, in one transaction, then the other calls in order.

    Every call of a batch was made before any of them was answered, so running them in this
    order is as if they had come in it; the reads then see only what was committed.
    """
    writes = [i for i, call in enumerate(calls) if call.write]
    outcomes: list[_Outcome] = [(None, None)] * len(calls)
    if len(writes) == 1:
        outcomes[writes[0]] = _run_one(db, calls[writes[0]])
    elif writes:
        for i, outcome in zip(writes, _run_together(db, [calls[i] for i in writes]), strict=True):
            outcomes[i] = outcome
    for i, call in enumerate(calls):
        if not call.write:
            outcomes[i] = _run_one(db, call)
    return outcomes


def _run_one(db: sqlite3.Connection, call: _Call) -> _Outcome:
    try:
        return call.work(db), None
    except Exception as error:  # handed to the caller, which re-raises it
        return None, error


def _run_together(db: sqlite3.Connection, writes: list[_Call]) -> list[_Outcome]:
    """`writes` in one transaction, each in a savepoint of its own, so one that fails leaves the
    others written. A write that loses its race changes no row and fails nothing. If the
    transaction itself fails (the lock not had within the busy timeout, the commit refused), none
    is kept and all get its error."""
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            outcomes = [_run_saved(db, call) for call in writes]
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    except Exception as error:
        return [(None, error)] * len(writes)
    return outcomes


def _run_saved(db: sqlite3.Connection, call: _Call) -> _Outcome:
    db.execute("SAVEPOINT write")
    try:
        result = call.work(db)
    except Exception as error:
        if not db.in_transaction:  # SQLite rolled the whole transaction back: all fail
            raise
        db.execute("ROLLBACK TO write")
        db.execute("RELEASE write")
        return None, error
    db.execute("RELEASE write")
    return result, None
