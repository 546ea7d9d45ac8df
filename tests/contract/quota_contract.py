"""What every `ConversationStore` must do with `create(max_conversations=...)`, and with reads and
deletes racing each other: a mixin for the classes that subclass `StoreContract`."""

from __future__ import annotations

import asyncio

import pytest

from app.domain.ports import ConversationStore, QuotaFull, VersionConflict

from .store_contract import FakeClock, make_conversation, next_version


class QuotaContract:
    async def test_a_creation_past_the_quota_is_refused_saying_how_many_are_kept(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        for n in range(3):
            await store.create(make_conversation(clock, conversation_id=f"c-{n}"), max_conversations=3)
        with pytest.raises(QuotaFull) as refused:
            await store.create(make_conversation(clock, conversation_id="c-3"), max_conversations=3)
        assert refused.value.kept == 3
        assert await store.get("oid-1", "c-3") is None
        assert await store.count("oid-1", "tenant-1") == 3

    async def test_the_quota_counts_only_the_users_live_conversations_in_the_tenant(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        await store.create(make_conversation(clock, conversation_id="old", expires_at=clock.now + 1))
        await store.create(make_conversation(clock, oid="oid-2", conversation_id="theirs"))
        await store.create(make_conversation(clock, conversation_id="elsewhere", tid="tenant-2"))
        clock.advance(2)  # "old" has expired
        await store.create(make_conversation(clock, conversation_id="new"), max_conversations=2)
        await store.create(make_conversation(clock, conversation_id="newer"), max_conversations=2)
        with pytest.raises(QuotaFull):
            await store.create(make_conversation(clock, conversation_id="newest"), max_conversations=2)

    async def test_a_taken_key_is_a_conflict_even_when_the_quota_is_full(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        await store.create(make_conversation(clock), max_conversations=1)
        with pytest.raises(VersionConflict):
            await store.create(make_conversation(clock), max_conversations=1)

    async def test_a_full_quota_leaves_writes_to_existing_conversations_alone(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        first = make_conversation(clock)
        etag = await store.create(first, max_conversations=1)
        await store.replace(next_version(first, clock), if_match=etag)
        found = await store.get("oid-1", "conv-1")
        assert found is not None and found.conversation.version == 2

    async def test_a_deleted_conversation_makes_room_again(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        await store.create(make_conversation(clock, conversation_id="a"), max_conversations=1)
        assert await store.delete("oid-1", "a") is True
        await store.create(make_conversation(clock, conversation_id="b"), max_conversations=1)
        with pytest.raises(QuotaFull):
            await store.create(make_conversation(clock, conversation_id="a"), max_conversations=1)

    async def test_creations_at_the_same_moment_never_pass_the_quota_together(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        results = await asyncio.gather(
            *(
                store.create(make_conversation(clock, conversation_id=f"c-{n}"), max_conversations=3)
                for n in range(30)
            ),
            return_exceptions=True,
        )
        assert sum(isinstance(r, str) for r in results) == 3, results
        assert all(isinstance(r, str | QuotaFull) for r in results), results
        assert await store.count("oid-1", "tenant-1") == 3

    async def test_reads_writes_and_deletes_racing_on_one_conversation_raise_nothing_unexpected(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        for _ in range(20):
            etag = await store.create(make_conversation(clock))
            calls = [
                *(store.get("oid-1", "conv-1") for _ in range(10)),
                store.delete("oid-1", "conv-1"),
                store.replace(next_version(make_conversation(clock), clock), if_match=etag),
                *(store.get("oid-1", "conv-1") for _ in range(10)),
                store.delete_all("oid-1", "tenant-1"),
            ]
            results = await asyncio.gather(*calls, return_exceptions=True)
            unexpected = [
                r for r in results if isinstance(r, BaseException) and not isinstance(r, VersionConflict)
            ]
            assert unexpected == []
            await store.delete_all("oid-1", "tenant-1")
            assert await store.get("oid-1", "conv-1") is None
