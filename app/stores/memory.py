"""A conversation store in a dict: for tests and single-process development (`ANVIL_STORE=memory`)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from app.domain.conversation import Conversation, ConversationPage, ConversationSummary, conversation_key
from app.domain.ports import QuotaFull, Stored, VersionConflict
from app.stores.cursor import comes_after, decode_cursor, encode_cursor

#: How often (seconds) a write also sweeps out every expired conversation.
PURGE_INTERVAL = 300.0


class MemoryStore:
    """`ConversationStore` kept in process memory.

    Methods never await, so each one runs to completion on the event loop: the check and the
    set in `create` and `replace` cannot interleave with another writer. Values are frozen
    `Conversation`s, so callers cannot change what is stored behind the store's back.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        # Each value with its ETag: a number this store never hands out twice, so a read made
        # before a delete cannot match the conversation created again after it (whose versions
        # start over at 1).
        self._items: dict[str, Stored] = {}
        self._etags = itertools.count(1)
        self._next_purge = 0.0

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        """The live conversation under this key and its ETag, or None when missing or expired."""
        return self._live(conversation_key(oid, conversation_id), self._clock())

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        """Store a new conversation; `VersionConflict` if a live one already has its key,
        `QuotaFull` if its user already keeps `max_conversations` live ones."""
        now = self._clock()
        if self._live(conversation.key, now) is not None:
            raise VersionConflict(conversation.key)
        if max_conversations is not None:
            kept = self._count(conversation.oid, conversation.tid, now)
            if kept >= max_conversations:
                raise QuotaFull(kept)
        return self._put(conversation, now)

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        """Overwrite the stored conversation if it still carries the ETag `if_match`."""
        now = self._clock()
        current = self._live(conversation.key, now)
        if current is None or current.etag != if_match:
            raise VersionConflict(conversation.key)
        return self._put(conversation, now)

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        """Remove a conversation; True if a live one was removed."""
        key = conversation_key(oid, conversation_id)
        removed = self._items.pop(key, None)
        return removed is not None and not removed.conversation.is_expired(self._clock())

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        """The user's live conversations, newest first, one page of at most `limit`."""
        now = self._clock()
        position = decode_cursor(cursor) if cursor is not None else None
        mine = [
            ConversationSummary.of(c)
            for c, _ in self._items.values()
            if c.oid == oid and c.tid == tid and not c.is_expired(now)
        ]
        mine.sort(key=lambda s: (-s.updated_at, s.conversation_id))
        if position is not None:
            mine = [s for s in mine if comes_after(s, position)]
        page = tuple(mine[:limit])
        more = len(mine) > limit
        return ConversationPage(page, encode_cursor(page[-1]) if more and page else None)

    async def count(self, oid: str, tid: str) -> int:
        """How many live conversations the user has in the tenant."""
        return self._count(oid, tid, self._clock())

    async def delete_all(self, oid: str, tid: str) -> int:
        """Remove every conversation of the user; returns how many live ones were removed."""
        now = self._clock()
        keys = [k for k, (c, _) in self._items.items() if c.oid == oid and c.tid == tid]
        return sum(not self._items.pop(k).conversation.is_expired(now) for k in keys)

    async def check(self, *, write: bool = False) -> None:
        """Always ready: there is nothing that can be down."""

    async def aclose(self) -> None:
        """Nothing to release; the data stays until the store is dropped."""

    def _put(self, conversation: Conversation, now: float) -> str:
        etag = str(next(self._etags))
        self._items[conversation.key] = Stored(conversation, etag)
        self._purge(now)
        return etag

    def _count(self, oid: str, tid: str, now: float) -> int:
        return sum(c.oid == oid and c.tid == tid and not c.is_expired(now) for c, _ in self._items.values())

    def _live(self, key: str, now: float) -> Stored | None:
        found = self._items.get(key)
        if found is not None and found.conversation.is_expired(now):
            del self._items[key]
            return None
        return found

    def _purge(self, now: float) -> None:
        # Conversations nobody reads again are never seen by `_live`; sweep them now and then
        # so a long-running dev server does not grow without bound.
        if now < self._next_purge:
            return
        self._next_purge = now + PURGE_INTERVAL
        for key in [k for k, (c, _) in self._items.items() if c.is_expired(now)]:
            del self._items[key]
