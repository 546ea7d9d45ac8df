"""What one process last read or wrote of each conversation, decoded, by key and ETag.

A store's ETags never repeat (a fresh random token per write), so an entry is the truth about
its ETag for ever: a read that finds the row still carrying the held ETag can take the held
value instead of decoding the document, and a write on top of the held value encodes only the
new turn. Entries are never changed, only replaced or dropped, and every method runs without
awaiting, so a `get`, `delete` or write racing another on the event loop finds an entry whole or
not at all (0.4.1 keyed its cache by version, which a delete restarts, and looked an entry up
again after awaiting, which a delete made fail).

Figures (a 2026-07-28 turn with history, 16 connections, CPU per call, `bench/compare.py`
against the same tree decoding every read and encoding every write): see docs/performance.md.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from app.domain.conversation import Conversation, Turn
from app.stores.codec import encode_document, encode_turn

#: Conversations each process keeps decoded.
CAPACITY = 1024


class Held(NamedTuple):
    """A conversation as stored under `etag`, and its turns as JSON text when this process
    wrote it (None after a read: the text of a read document is not kept)."""

    etag: str
    conversation: Conversation
    turns: tuple[str, ...] | None


class Decoded:
    """A bounded map from conversation key to the `Held` value of its last known ETag."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._held: OrderedDict[str, Held] = OrderedDict()

    def get(self, key: str) -> Held | None:
        return self._held.get(key)

    def remember(self, key: str, held: Held) -> None:
        self._held[key] = held
        self._held.move_to_end(key)
        if len(self._held) > self._capacity:
            self._held.popitem(last=False)

    def forget(self, key: str) -> None:
        self._held.pop(key, None)

    def forget_where(self, prefix: str) -> None:
        for key in [k for k in self._held if k.startswith(prefix)]:
            del self._held[key]

    def encode(self, c: Conversation) -> tuple[tuple[str, ...], str]:
        """`c`'s turns as JSON text and its document, reusing the text of the turns held."""
        turns = _encoded_turns(c.turns, self._held.get(c.key))
        return turns, encode_document(c, turns)


def _encoded_turns(turns: tuple[Turn, ...], held: Held | None) -> tuple[str, ...]:
    """`turns` as JSON text, reusing the text of those `held` already has.

    A turn appended to a held conversation keeps the turns before it (the oldest may be dropped),
    so its encoded ones are a slice of the held ones; anything else is encoded whole.
    """
    if held is not None and held.turns is not None and held.conversation.turns and turns:
        before = held.conversation.turns
        start = turns[0].number - before[0].number  # where `turns` begin among the held ones
        kept = len(before) - start
        # Tuples compare element by element, and the same turn object compares equal at once.
        if 0 <= start < len(before) and turns[:kept] == before[start:]:
            return held.turns[start:] + tuple(encode_turn(t) for t in turns[kept:])
    return tuple(encode_turn(t) for t in turns)
