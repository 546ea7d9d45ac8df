"""What this process last wrote or read of each conversation, decoded, under the ETag it had.

A store's ETags are drawn anew by every write and never repeat, so an entry is the truth about
its ETag for ever: a read that finds the row still carrying the held ETag takes the held value
instead of the document (`SqliteStore.get` asks for the document only when the ETags differ),
and a write on top of the held value encodes only the turns it adds.

Race-free by construction: an entry is an immutable tuple, only ever replaced whole or dropped,
no method awaits, and a held value is only ever used for a row that carries its ETag. Whether an
entry was taken before an await or looked up after it, and whatever a delete or write did
meanwhile, it is then either the row's value or unused, never wrong, and a missing entry is a
decode, never an error (0.4.1 keyed its cache by version, which a delete restarts, and indexed
it after awaiting, which a delete made fail: tests/regressions/test_reads_racing_deletes_were_500.py).

Figures: `SqliteStore.get`, docs/performance.md.
"""

from __future__ import annotations

from typing import NamedTuple

from app.domain.conversation import Conversation, Turn
from app.stores.codec import encode_document, encode_turn

#: Bytes of documents held per process (their JSON length; the decoded values take about as
#: much again). A conversation is at most `history_max_bytes` (256 KiB by default) plus its
#: keys, so at least 32 of the largest fit, and about 1,600 of 10 KiB.
BUDGET = 16 * 1024 * 1024


class Held(NamedTuple):
    """A conversation as stored under `etag`, and its turns as JSON text when this process
    wrote it (None after a read: the text of a read document is not split into turns)."""

    etag: str
    conversation: Conversation
    turns: tuple[str, ...] | None
    #: The length of its document, counted against `BUDGET`.
    size: int


class HeldConversations:
    """Conversation key -> the `Held` value of the last ETag seen, the least recently seen
    dropped first once the documents exceed `budget` bytes."""

    def __init__(self, budget: int = BUDGET) -> None:
        self._budget = budget
        self._size = 0
        self._held: dict[str, Held] = {}  # in the order they were last kept

    def get(self, key: str) -> Held | None:
        return self._held.get(key)

    def keep(self, key: str, held: Held) -> None:
        self.forget(key)
        self._held[key] = held
        self._size += held.size
        while self._size > self._budget and self._held:
            self.forget(next(iter(self._held)))

    def forget(self, key: str) -> None:
        dropped = self._held.pop(key, None)
        if dropped is not None:
            self._size -= dropped.size

    def forget_owner(self, owner_prefix: str) -> None:
        """Drop every conversation whose key starts with `owner_prefix` (a user's)."""
        for key in [k for k in self._held if k.startswith(owner_prefix)]:
            self.forget(key)

    def encode(self, c: Conversation) -> tuple[tuple[str, ...], str]:
        """`c`'s turns as JSON text, and its document, reusing the text of the turns held."""
        turns = _encoded_turns(c.turns, self._held.get(c.key))
        return turns, encode_document(c, turns)


def _encoded_turns(turns: tuple[Turn, ...], held: Held | None) -> tuple[str, ...]:
    """`turns` as JSON text, reusing the text of those `held` already has.

    A turn appended to a held conversation keeps the turns before it (the oldest may be
    dropped), so its encoded ones are a slice of the held ones; anything else is encoded whole.
    """
    if held is not None and held.turns is not None and held.conversation.turns and turns:
        before = held.conversation.turns
        start = turns[0].number - before[0].number  # where `turns` begin among the held ones
        kept = len(before) - start
        # Tuples compare element by element, and the same turn object compares equal at once.
        if 0 <= start < len(before) and turns[:kept] == before[start:]:
            return held.turns[start:] + tuple(encode_turn(t) for t in turns[kept:])
    return tuple(encode_turn(t) for t in turns)
