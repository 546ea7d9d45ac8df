"""`Conversation.with_turn` keeps exactly the turns the bounds allow, whatever the text."""

from __future__ import annotations

import random

import pytest

from app.adapters.stores.codec import from_document, to_document
from app.domain.conversation import Conversation, Turn

TEXTS = ["", "a", "short question", "é" * 40, "漢字" * 30, "🙂" * 25, "x" * 300]


def kept_by_the_rule(turns: list[Turn], max_turns: int, max_bytes: int) -> int:
    """How many turns the bounds drop, counted the slow and obvious way."""
    drop = 0
    while len(turns) - drop > 1 and (
        len(turns) - drop > max_turns or sum(t.size() for t in turns[drop:]) > max_bytes
    ):
        drop += 1
    return drop


@pytest.mark.parametrize("seed", range(40))
def test_with_turn_drops_what_the_rule_drops(seed: int) -> None:
    rng = random.Random(seed)
    max_turns, max_bytes = rng.randint(1, 8), rng.choice([64, 200, 700, 2000, 10_000])
    conversation = Conversation("oid", "tid", "c", 0.0, 0.0, 1.0)
    for number in range(1, rng.randint(2, 30)):
        turn = Turn(number, rng.choice(TEXTS), rng.choice(TEXTS), float(number))
        if rng.random() < 0.3:
            # As read back from a store: a copy that has not been through `with_turn`.
            conversation = from_document(to_document(conversation))
        expected_drop = kept_by_the_rule([*conversation.turns, turn], max_turns, max_bytes)
        before = conversation
        conversation = conversation.with_turn(
            turn, now=float(number), ttl_seconds=10, max_turns=max_turns, max_bytes=max_bytes
        )
        assert conversation.turns == (*before.turns, turn)[expected_drop:]
        assert conversation.dropped == before.dropped + expected_drop
        assert conversation.turns[-1] is turn and conversation.version == before.version + 1
