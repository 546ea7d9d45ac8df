"""Doubles for AskService tests: principals, a clock moved by hand, a store that counts its
calls (and one that loses a race). The engine is `support.scripted_engine.ScriptedEngine`."""

from __future__ import annotations

import dataclasses
from collections import Counter

import anyio
import anyio.lowlevel

from app.domain.conversation import Conversation, Turn
from app.domain.ports import Stored, VersionConflict
from app.domain.principal import Principal
from app.stores.memory import MemoryStore

TENANT = "tenant-1"
ALICE = Principal(oid="oid-alice", tid=TENANT, scopes=frozenset({"access_as_user"}), expires_at=2e9)
BOB = Principal(oid="oid-bob", tid=TENANT, scopes=frozenset({"access_as_user"}), expires_at=2e9)
ALICE_ELSEWHERE = dataclasses.replace(ALICE, tid="tenant-2")


class FakeClock:
    """A clock the tests move by hand."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingStore:
    """Delegates to a `MemoryStore` and counts every call, so tests can prove "zero store calls".

    With `yielding=True` every call first lets other tasks run, so concurrent asks interleave
    between reading a conversation and writing it back.
    """

    def __init__(self, inner: MemoryStore, *, yielding: bool = False) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.yielding = yielding

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    async def _enter(self, name: str) -> None:
        self.calls[name] += 1
        if self.yielding:
            await anyio.lowlevel.checkpoint()

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        await self._enter("get")
        return await self.inner.get(oid, conversation_id)

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        await self._enter("create")
        return await self.inner.create(conversation, max_conversations=max_conversations)

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        await self._enter("replace")
        return await self.inner.replace(conversation, if_match=if_match)

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        await self._enter("delete")
        return await self.inner.delete(oid, conversation_id, if_match=if_match)

    async def check(self, *, write: bool = False) -> None:
        await self._enter("check")

    async def aclose(self) -> None:
        await self._enter("aclose")


class InterruptingStore(CountingStore):
    """On the first `replace`, another writer's turn lands just before ours, which then conflicts."""

    def __init__(self, inner: MemoryStore, clock: FakeClock) -> None:
        super().__init__(inner)
        self.clock = clock
        self.interrupted = False

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        if not self.interrupted:
            self.interrupted = True
            found = await self.inner.get(conversation.oid, conversation.conversation_id)
            assert found is not None
            current, etag = found
            other = Turn(current.next_turn_number, "other writer", "other answer", self.clock.now)
            await self.inner.replace(
                dataclasses.replace(
                    current,
                    turns=(*current.turns, other),
                    version=current.version + 1,
                ),
                if_match=etag,
            )
            self.calls["replace"] += 1
            raise VersionConflict(conversation.key)
        return await super().replace(conversation, if_match=if_match)


def stored_key(memory: MemoryStore, principal: Principal, conversation_id: str) -> str:
    """The key `MemoryStore` keeps the conversation under (read from its items)."""
    keys = [key for key, item in memory._items.items() if item.conversation.oid == principal.oid]
    assert keys == [f"mcp:{principal.oid}:{conversation_id}"]
    return keys[0]
