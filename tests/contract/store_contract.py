"""What every `ConversationStore` must do, as one test class to subclass per store.

A subclass provides a `store` fixture that yields an opened store reading time from the
`clock` fixture (override `clock` too if the store needs a different one), and closes it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from support.stores import read

from app.domain.conversation import Conversation, Turn
from app.domain.ports import ConversationStore, VersionConflict

TTL = 3600.0


class FakeClock:
    """A clock the tests move by hand; call it for the current time."""

    def __init__(self, now: float = 1_700_000_000.25) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_conversation(
    clock: FakeClock, oid: str = "oid-1", conversation_id: str = "conv-1", **changes: Any
) -> Conversation:
    """A one-turn conversation written now, with `changes` applied to its fields."""
    written_now = Conversation(
        oid=oid,
        tid="tenant-1",
        conversation_id=conversation_id,
        created_at=clock.now,
        updated_at=clock.now,
        expires_at=clock.now + TTL,
        version=1,
        turns=(Turn(1, "What is Anvil?", "A service.", clock.now),),
    )
    return dataclasses.replace(written_now, **changes)


def next_version(c: Conversation, clock: FakeClock, title: str = "next") -> Conversation:
    """`c` after one more write: the shape `replace` is given by the service."""
    return make_conversation(
        clock,
        c.oid,
        c.conversation_id,
        created_at=c.created_at,
        version=c.version + 1,
        title=title,
        turns=(*c.turns, Turn(c.next_turn_number, "And then?", "More.", clock.now)),
    )


@pytest.mark.anyio
class StoreContract:
    """Behaviour shared by the memory, SQLite and Cosmos DB stores."""

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    async def test_get_missing_returns_none(self, store: ConversationStore) -> None:
        assert await read(store, "oid-1", "nothing-here") is None

    async def test_create_then_get_round_trips_every_field(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        turns = (
            Turn(4, "Première question ✓", "Réponse\nsur deux lignes", clock.now - 30.5),
            Turn(5, "with retry key", "answer", clock.now - 10.125, "req-1", "sha256:abc"),
            Turn(6, "only a retry key", "", clock.now, client_request_id="req-2"),
        )
        c = make_conversation(
            clock, version=7, turns=turns, dropped=3, instructions="Be brief.", title="Tëst 🔨"
        )
        await store.create(c)
        assert await read(store, "oid-1", "conv-1") == c

    async def test_create_twice_conflicts(self, store: ConversationStore, clock: FakeClock) -> None:
        first = make_conversation(clock, title="first")
        await store.create(first)
        with pytest.raises(VersionConflict):
            await store.create(make_conversation(clock, title="second"))
        assert await read(store, "oid-1", "conv-1") == first

    async def test_replace_with_current_version_succeeds(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        c1 = make_conversation(clock)
        etag1 = await store.create(c1)
        clock.advance(5)
        c2 = next_version(c1, clock)
        etag2 = await store.replace(c2, if_match=etag1)
        assert await store.get("oid-1", "conv-1") == (c2, etag2)
        c3 = next_version(c2, clock, title="third")
        etag3 = await store.replace(c3, if_match=etag2)
        assert await store.get("oid-1", "conv-1") == (c3, etag3)
        assert len({etag1, etag2, etag3}) == 3

    async def test_replace_with_stale_version_conflicts_and_keeps_stored_value(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        c1 = make_conversation(clock)
        etag1 = await store.create(c1)
        c2 = next_version(c1, clock)
        await store.replace(c2, if_match=etag1)
        with pytest.raises(VersionConflict):
            await store.replace(next_version(c1, clock, title="stale"), if_match=etag1)
        assert await read(store, "oid-1", "conv-1") == c2

    async def test_replace_missing_conflicts(self, store: ConversationStore, clock: FakeClock) -> None:
        gone = make_conversation(clock)
        etag = await store.create(gone)
        assert await store.delete("oid-1", "conv-1") is True
        with pytest.raises(VersionConflict):
            await store.replace(next_version(gone, clock), if_match=etag)
        assert await read(store, "oid-1", "conv-1") is None

    async def test_expired_conversation_reads_as_missing(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        await store.create(make_conversation(clock))
        clock.advance(TTL - 1)
        assert await read(store, "oid-1", "conv-1") is not None
        clock.advance(1)  # exactly at expires_at: expired
        assert await read(store, "oid-1", "conv-1") is None

    async def test_create_over_expired_succeeds(self, store: ConversationStore, clock: FakeClock) -> None:
        await store.create(make_conversation(clock, title="old"))
        clock.advance(TTL + 1)
        fresh = make_conversation(clock, title="fresh")
        await store.create(fresh)
        assert await read(store, "oid-1", "conv-1") == fresh

    async def test_replace_expired_conflicts(self, store: ConversationStore, clock: FakeClock) -> None:
        c1 = make_conversation(clock)
        etag = await store.create(c1)
        clock.advance(TTL + 1)
        with pytest.raises(VersionConflict):
            await store.replace(next_version(c1, clock), if_match=etag)
        assert await read(store, "oid-1", "conv-1") is None

    async def test_delete_live_returns_true_and_removes(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        await store.create(make_conversation(clock))
        assert await store.delete("oid-1", "conv-1") is True
        assert await read(store, "oid-1", "conv-1") is None
        assert await store.delete("oid-1", "conv-1") is False

    async def test_delete_with_the_etag_read_removes(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        etag = await store.create(make_conversation(clock))
        assert await store.delete("oid-1", "conv-1", if_match=etag) is True
        assert await read(store, "oid-1", "conv-1") is None
        assert await store.delete("oid-1", "conv-1", if_match=etag) is False

    async def test_delete_with_an_older_etag_still_removes(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        c1 = make_conversation(clock)
        etag = await store.create(c1)
        await store.replace(next_version(c1, clock), if_match=etag)
        assert await store.delete("oid-1", "conv-1", if_match=etag) is True
        assert await read(store, "oid-1", "conv-1") is None

    async def test_delete_missing_returns_false(self, store: ConversationStore) -> None:
        assert await store.delete("oid-1", "nothing-here") is False

    async def test_delete_expired_returns_false(self, store: ConversationStore, clock: FakeClock) -> None:
        await store.create(make_conversation(clock))
        clock.advance(TTL + 1)
        assert await store.delete("oid-1", "conv-1") is False

    async def test_keys_are_per_owner_and_conversation(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        mine = make_conversation(clock, "oid-a", "shared", title="mine")
        theirs = make_conversation(clock, "oid-b", "shared", title="theirs")
        etag = await store.create(mine)
        await store.create(theirs)
        assert await read(store, "oid-a", "shared") == mine
        assert await read(store, "oid-b", "shared") == theirs
        await store.replace(next_version(mine, clock), if_match=etag)
        assert await read(store, "oid-b", "shared") == theirs
        assert await store.delete("oid-a", "shared") is True
        assert await read(store, "oid-b", "shared") == theirs

    async def test_check_passes(self, store: ConversationStore) -> None:
        await store.check()

    async def test_concurrent_replaces_from_one_version_let_exactly_one_win(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        c1 = make_conversation(clock)
        etag = await store.create(c1)
        attempts = [next_version(c1, clock, title=f"writer {i}") for i in range(10)]
        results = await asyncio.gather(
            *(store.replace(a, if_match=etag) for a in attempts), return_exceptions=True
        )
        winners = [a for a, r in zip(attempts, results, strict=True) if isinstance(r, str)]
        assert len(winners) == 1
        assert all(isinstance(r, VersionConflict) for r in results if not isinstance(r, str))
        assert await read(store, "oid-1", "conv-1") == winners[0]

    # --- listing and deleting all of a user's conversations ----------------------------------

    async def test_list_is_newest_first_and_only_the_users_live_conversations(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        await store.create(make_conversation(clock, conversation_id="old", title="Old one"))
        clock.advance(10)
        await store.create(make_conversation(clock, conversation_id="new", title="New one"))
        await store.create(make_conversation(clock, oid="oid-2", conversation_id="someone-elses"))
        await store.create(make_conversation(clock, conversation_id="short-lived", expires_at=clock.now + 5))
        clock.advance(6)

        page = await store.list("oid-1", "tenant-1", limit=10)

        assert [s.conversation_id for s in page.items] == ["new", "old"]
        assert page.next_cursor is None
        newest = page.items[0]
        assert (newest.title, newest.turns, newest.expires_at) == ("New one", 1, clock.now - 6 + TTL)
        assert newest.updated_at == clock.now - 6

    async def test_list_pages_with_a_cursor_without_skipping_or_repeating(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        expected = []
        for i in range(7):
            # Pairs share a timestamp, so ties must be ordered too.
            if i % 2 == 0:
                clock.advance(1)
            await store.create(make_conversation(clock, conversation_id=f"c{i}"))
            expected.append((clock.now, f"c{i}"))
        expected.sort(key=lambda item: (-item[0], item[1]))

        seen: list[str] = []
        cursor = None
        for _ in range(10):
            page = await store.list("oid-1", "tenant-1", limit=3, cursor=cursor)
            assert len(page.items) <= 3
            seen.extend(s.conversation_id for s in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == [cid for _, cid in expected]

    async def test_list_counts_turns_including_dropped_ones(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        conversation = make_conversation(clock, dropped=4, turns=(Turn(5, "q", "a", clock.now),))
        await store.create(conversation)
        (summary,) = (await store.list("oid-1", "tenant-1", limit=5)).items
        assert summary.turns == 5

    async def test_list_refuses_a_foreign_cursor(self, store: ConversationStore) -> None:
        from app.domain.ports import InvalidCursor

        with pytest.raises(InvalidCursor):
            await store.list("oid-1", "tenant-1", limit=5, cursor="not-a-cursor-we-issued")

    async def test_list_of_a_user_without_conversations_is_empty(self, store: ConversationStore) -> None:
        page = await store.list("nobody", "tenant-1", limit=5)
        assert page.items == () and page.next_cursor is None

    async def test_delete_all_removes_only_that_users_conversations(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        for cid in ("a", "b", "c"):
            await store.create(make_conversation(clock, conversation_id=cid))
        await store.create(make_conversation(clock, oid="oid-2", conversation_id="a"))

        assert await store.delete_all("oid-1", "tenant-1") == 3

        assert (await store.list("oid-1", "tenant-1", limit=10)).items == ()
        assert await read(store, "oid-1", "a") is None
        assert await read(store, "oid-2", "a") is not None
        assert await store.delete_all("oid-1", "tenant-1") == 0

    async def test_count_is_of_the_users_live_conversations_in_the_tenant(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        assert await store.count("oid-1", "tenant-1") == 0
        for cid in ("a", "b", "c"):
            await store.create(make_conversation(clock, conversation_id=cid))
        await store.create(make_conversation(clock, conversation_id="short", expires_at=clock.now + 10))
        await store.create(make_conversation(clock, conversation_id="away", tid="tenant-2"))
        await store.create(make_conversation(clock, oid="oid-2", conversation_id="a"))
        assert await store.count("oid-1", "tenant-1") == 4
        clock.advance(11)
        assert await store.count("oid-1", "tenant-1") == 3, "an expired conversation no longer counts"
        assert await store.count("oid-1", "tenant-2") == 1
        assert await store.count("oid-2", "tenant-1") == 1

    async def test_list_and_delete_all_keep_to_the_callers_tenant(
        self, store: ConversationStore, clock: FakeClock
    ) -> None:
        await store.create(make_conversation(clock, conversation_id="home"))
        await store.create(make_conversation(clock, conversation_id="away", tid="tenant-2"))

        assert [s.conversation_id for s in (await store.list("oid-1", "tenant-2", limit=5)).items] == ["away"]
        assert await store.delete_all("oid-1", "tenant-2") == 1
        assert [s.conversation_id for s in (await store.list("oid-1", "tenant-1", limit=5)).items] == ["home"]

    @pytest.mark.parametrize("quota", [None, 5])
    async def test_a_token_read_before_a_delete_never_matches_the_conversation_created_again(
        self, store: ConversationStore, clock: FakeClock, quota: int | None
    ) -> None:
        # Created again with the same versions and turns, so only the token can tell them apart.
        before = make_conversation(clock)
        old_etag = await store.create(before, max_conversations=quota)
        assert await store.delete("oid-1", "conv-1") is True
        again = make_conversation(clock)
        new_etag = await store.create(again, max_conversations=quota)
        assert new_etag != old_etag

        with pytest.raises(VersionConflict):
            await store.replace(next_version(before, clock, title="before the delete"), if_match=old_etag)
        assert await store.delete("oid-1", "conv-1", if_match=old_etag) is True, "a delete still wins"
        assert await read(store, "oid-1", "conv-1") is None
        with pytest.raises(VersionConflict):
            await store.replace(next_version(again, clock), if_match=new_etag)
