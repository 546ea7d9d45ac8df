"""The memory store beyond the shared contract: ETags never repeat, expired values are swept."""

from __future__ import annotations

import pytest
from support.stores import TTL, Clock, conversation

from app.domain.ports import VersionConflict
from app.stores import memory as memory_module
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio


async def test_an_etag_read_before_a_delete_never_matches_the_conversation_created_again() -> None:
    clock = Clock()
    store = MemoryStore(clock)
    before = await store.create(conversation(clock))
    assert await store.delete("oid-1", "conv-1") is True
    again = await store.create(conversation(clock))
    assert again != before
    with pytest.raises(VersionConflict):
        await store.replace(conversation(clock, version=2), if_match=before)


async def test_a_write_sweeps_out_conversations_nobody_reads_again() -> None:
    clock = Clock()
    store = MemoryStore(clock)
    await store.create(conversation(clock, "short", expires_at=clock.now + 1))
    clock.now += max(TTL, memory_module.PURGE_INTERVAL)
    await store.create(conversation(clock, "later"))
    assert await store.count("oid-1", "tenant-1") == 1
    # Gone from memory, not only hidden: nothing is left of it to list or delete.
    assert await store.delete("oid-1", "short") is False
    assert [s.conversation_id for s in (await store.list("oid-1", "tenant-1", limit=5)).items] == ["later"]


async def test_a_stored_value_cannot_be_changed_behind_the_stores_back() -> None:
    clock = Clock()
    store = MemoryStore(clock)
    written = conversation(clock)
    await store.create(written)
    stored = await store.get("oid-1", "conv-1")
    assert stored is not None and stored.conversation == written
    with pytest.raises(AttributeError):
        stored.conversation.title = "changed"  # type: ignore[misc]
