"""What a turn costs, in counts rather than time: store operations and stored bytes."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from support.scripted_engine import ScriptedEngine
from support.stores import read

from app.domain.ask import AskService, HistoryLimits
from app.domain.ask_types import AskRequest
from app.domain.ports import Answer
from app.domain.principal import Principal
from app.engines.echo import EchoEngine
from app.stores.codec import to_document
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio

ALICE = Principal("oid-alice", "tenant-1", frozenset({"access_as_user"}), 9e9)


class OperationCounter:
    """Counts every store method called, delegating to a MemoryStore."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await method(*args, **kwargs)

        return counted


async def test_a_continued_turn_costs_one_read_and_one_write() -> None:
    store = OperationCounter()
    service = AskService(store, EchoEngine())  # type: ignore[arg-type]
    await service.ask(ALICE, AskRequest("first", "costs"))
    assert store.calls == Counter({"get": 1, "create": 1})
    store.calls.clear()
    await service.ask(ALICE, AskRequest("second", "costs"))
    assert store.calls == Counter({"get": 1, "replace": 1})


async def test_a_one_shot_ask_costs_no_store_operation() -> None:
    store = OperationCounter()
    service = AskService(store, EchoEngine())  # type: ignore[arg-type]
    await service.ask(ALICE, AskRequest("no id"))
    await service.ask(None, AskRequest("anonymous", "ignored-id"))
    assert store.calls == Counter()


async def test_the_stored_item_at_turn_500_is_no_larger_than_at_turn_50() -> None:
    store = MemoryStore()
    questions = [f"question number {turn:04d}" for turn in range(1, 501)]
    # Answers of one shape whatever the history, so sizes compare like with like.
    engine = ScriptedEngine(*(Answer(f"The answer to {question!r} is 42.") for question in questions))
    service = AskService(store, engine, limits=HistoryLimits(max_turns=50))
    sizes = {}
    for turn, question in enumerate(questions, start=1):
        await service.ask(ALICE, AskRequest(question, "long-running"))
        if turn in (50, 500):
            stored = await read(store, ALICE.oid, "long-running")
            assert stored is not None
            item = json.dumps(to_document(stored), separators=(",", ":"))
            # Turn numbers, counters and timestamps gain digits as a conversation ages; with every
            # number written as one digit, what remains is what the bounds must keep flat.
            sizes[turn] = len(re.sub(r"\d+", "0", item))
            assert len(stored.turns) == 50
    assert sizes[500] <= sizes[50]
