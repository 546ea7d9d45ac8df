"""What the SQLite store keeps decoded (`app/stores/held.py`): a document decoded only when the
row carries an ETag not held, a write encoding only the turns it adds, reads racing writes and
deletes, and the bound on what is held."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.stores import TTL, Clock, conversation, raw

from app.domain.conversation import Conversation, Turn
from app.domain.ports import Stored
from app.stores import held as held_module
from app.stores import sqlite as sqlite_module
from app.stores.codec import to_document
from app.stores.held import Held, HeldConversations
from app.stores.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "conversations.db"


@pytest.fixture
async def store(path: Path, clock: Clock) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(path, clock)
    yield opened
    await opened.aclose()


def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The conversation ids the store decodes from now on."""
    seen: list[str] = []
    decode = sqlite_module.from_document

    def counted(document: dict[str, object]) -> object:
        seen.append(str(document["conversationId"]))
        return decode(document)

    monkeypatch.setattr(sqlite_module, "from_document", counted)
    return seen


async def test_a_document_is_decoded_only_when_the_row_carries_an_etag_not_held(
    store: SqliteStore, path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = decodes(monkeypatch)
    etag = await store.create(conversation(clock))
    assert await store.get("oid-1", "conv-1") == Stored(conversation(clock), etag)
    assert seen == []  # what this process wrote
    other = await SqliteStore.open(path, clock)
    try:
        theirs = await other.replace(conversation(clock, version=2, title="theirs"), if_match=etag)
    finally:
        await other.aclose()
    changed = Stored(conversation(clock, version=2, title="theirs"), theirs)
    for _ in range(2):
        assert await store.get("oid-1", "conv-1") == changed
    assert seen == ["conv-1"]  # once, then held


async def test_a_write_encodes_only_the_turns_it_adds(
    store: SqliteStore, path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[int] = []
    encode = held_module.encode_turn
    monkeypatch.setattr(held_module, "encode_turn", lambda t: encoded.append(t.number) or encode(t))
    first = conversation(clock, version=3)
    etag = await store.create(first)
    clock.now += 1
    turn = Turn(4, "q4", "a4", clock.now)
    longer = first.with_turn(turn, now=clock.now, ttl_seconds=TTL, max_turns=3, max_bytes=10_000)
    await store.replace(longer, if_match=etag)
    assert encoded == [1, 2, 3, 4]  # the first write whole; the next, turn 4 only (turn 1 dropped)
    with raw(path) as db:
        (document,) = db.execute("SELECT document FROM conversations").fetchone()
    assert json.loads(document) == to_document(longer)


async def test_reads_racing_writes_deletes_and_creations_pair_each_conversation_with_its_etag(
    store: SqliteStore, clock: Clock
) -> None:
    # Every read returns a whole row as it stood at some point: never a value kept from before
    # a delete, never one conversation under another's ETag, never an error.
    written: dict[str, Conversation] = {}
    etag = await store.create(conversation(clock, title="0"))
    written[etag] = conversation(clock, title="0")
    reads: list[Stored | None] = []

    async def read(times: int) -> None:
        for _ in range(times):
            reads.append(await store.get("oid-1", "conv-1"))

    for step in range(1, 30):
        readers = [asyncio.ensure_future(read(3)) for _ in range(4)]
        await asyncio.sleep(0)
        if step % 3 == 0:
            assert await store.delete("oid-1", "conv-1") is True
            again = conversation(clock, title=f"{step} again")
            written[await store.create(again)] = again
        else:
            changed = conversation(clock, version=step + 1, title=str(step))
            written[etag := await store.replace(changed, if_match=etag)] = changed
        await asyncio.gather(*readers)
        found = await store.get("oid-1", "conv-1")
        assert found is not None
        etag = found.etag
    assert reads and all(r is None or written[r.etag] == r.conversation for r in reads)


def test_what_is_held_stays_within_its_budget_the_least_recently_kept_dropped_first() -> None:
    clock = Clock()
    held = HeldConversations(budget=250)
    for name in "abc":
        held.keep(name, Held(f"etag-{name}", conversation(clock, name), None, 100))
    assert [held.get(name) is not None for name in "abc"] == [False, True, True]
    held.keep("b", Held("etag-b2", conversation(clock, "b"), None, 100))  # kept again: now the newest
    held.keep("d", Held("etag-d", conversation(clock, "d"), None, 100))
    assert [held.get(name) is not None for name in "bcd"] == [True, False, True]
    held.forget_owner("b")
    assert held.get("b") is None and held.get("d") is not None
