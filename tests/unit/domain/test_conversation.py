"""`Conversation.with_turn` keeps exactly the turns the bounds allow, whatever the text."""

from __future__ import annotations

import dataclasses
import random

import pytest

from app.domain.conversation import Conversation, Turn
from app.stores.codec import from_document, to_document

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
        # Carried from version to version, it stays what measuring the kept turns gives.
        assert conversation.kept_bytes == sum(t.size() for t in conversation.turns)


@pytest.mark.parametrize("text", [*TEXTS, "mixed ascii and é", "\x00\x7f"])
def test_a_turn_counts_the_utf8_bytes_of_its_text(text: str) -> None:
    turn = Turn(1, text, text[::-1] + "?", 0.0)
    assert turn.size() == len(text.encode("utf-8")) + len((text[::-1] + "?").encode("utf-8")) + 64


def test_with_turn_keeps_every_field_it_does_not_change() -> None:
    # Every field set to something other than its default, so one left behind shows.
    before = Conversation(
        oid="oid",
        tid="tid",
        conversation_id="c",
        created_at=1.0,
        updated_at=2.0,
        expires_at=3.0,
        version=4,
        turns=(Turn(6, "q", "a", 2.0),),
        dropped=5,
        instructions="Be brief.",
        title="A title",
    )
    turn = Turn(7, "q2", "a2", 10.0)
    after = before.with_turn(turn, now=10.0, ttl_seconds=5, max_turns=1, max_bytes=1000)
    changed = {"turns", "dropped", "updated_at", "expires_at", "version", "kept_bytes"}
    for field in dataclasses.fields(Conversation):
        if field.name not in changed:
            assert getattr(after, field.name) == getattr(before, field.name), field.name
    assert (after.turns, after.dropped, after.version) == ((turn,), 6, 5)
    assert (after.updated_at, after.expires_at) == (10.0, 15.0)
    assert after.kept_bytes == turn.size() and before.kept_bytes == Turn(6, "q", "a", 2.0).size()
