"""TurnQueue: writers of one conversation in one process take turns, in the order they came.

A busy conversation is then a queue instead of a storm of conflicting writes. The queue also
remembers the last version this process wrote, so the next writer in line starts from it
instead of reading it back; it never hands that version to a writer whose own read came after
it (that read is at least as fresh, and may have seen the conversation deleted), and it
forgets a conversation when this process deletes it.
"""

from __future__ import annotations

import anyio

from app.domain.conversation import conversation_key
from app.domain.ports import Stored


class Turns:
    """One conversation's place in the `TurnQueue`. Entered with `async with`."""

    __slots__ = ("_key", "_queue", "holders", "latest", "lock", "written")

    def __init__(self, queue: TurnQueue, key: str) -> None:
        self._queue = queue
        self._key = key
        # FIFO: writers of one conversation go in the order they came. `fast_acquire`: a free lock
        # is taken without first yielding to the event loop (anyio's default yields once, in a
        # shielded cancel scope), which is the common case with one writer per conversation.
        self.lock = anyio.Lock(fast_acquire=True)
        self.holders = 0
        #: The last version of the conversation this process wrote, and when (`TurnQueue.mark`).
        self.latest: Stored | None = None
        self.written = 0

    def since(self, mark: int) -> Stored | None:
        """The version this process wrote after `mark` was taken, if any."""
        return self.latest if self.written > mark else None

    def record(self, stored: Stored) -> None:
        """Remember `stored` as just written by this process."""
        self.latest = stored
        self.written = self._queue.count_write()

    async def __aenter__(self) -> Turns:
        self.holders += 1
        try:
            await self.lock.acquire()
        except BaseException:
            self._leave()
            raise
        return self

    async def __aexit__(self, *_: object) -> None:
        self.lock.release()
        self._leave()

    def _leave(self) -> None:
        self.holders -= 1
        if not self.holders:
            self._queue.drop(self._key)


class TurnQueue:
    """Per-conversation queues for one process. A queue nobody waits in is dropped at once."""

    def __init__(self) -> None:
        self._queues: dict[str, Turns] = {}
        self._writes = 0

    def mark(self) -> int:
        """A point in this process's writes: take it before reading a conversation, and hand it
        to `Turns.since` to learn whether this process wrote the conversation after that read."""
        return self._writes

    def count_write(self) -> int:
        self._writes += 1
        return self._writes

    def turn(self, key: str) -> Turns:
        """The queue of conversation `key`: `async with queue.turn(key) as turns:` waits for it."""
        turns = self._queues.get(key)
        if turns is None:
            turns = self._queues[key] = Turns(self, key)
        return turns

    def drop(self, key: str) -> None:
        del self._queues[key]

    def forget(self, key: str) -> None:
        """Conversation `key` was deleted: no writer may start from what this process wrote of it."""
        turns = self._queues.get(key)
        if turns is not None:
            turns.latest = None

    def forget_user(self, oid: str) -> None:
        """Every conversation of user `oid` was deleted (see `forget`)."""
        prefix = conversation_key(oid, "")
        for key, turns in self._queues.items():
            if key.startswith(prefix):
                turns.latest = None
