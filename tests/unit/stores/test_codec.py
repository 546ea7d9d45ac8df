"""The conversation document: its exact shape and an exact round trip."""

from __future__ import annotations

import json

import pydantic_core
import pytest

from app.domain.conversation import Conversation, Turn
from app.stores.codec import from_document, to_document

NOW = 1_700_000_000.5


def sample() -> Conversation:
    return Conversation(
        oid="oid-1",
        tid="tenant-1",
        conversation_id="conv.1",
        created_at=NOW - 100,
        updated_at=NOW,
        expires_at=NOW + 3600,
        version=4,
        turns=(
            Turn(3, "q3", "a3", NOW - 50),
            Turn(4, "q4 ✓", "a4 🔨", NOW, client_request_id="req-4", request_digest="sha256:d4"),
        ),
        dropped=2,
        instructions="Be brief.",
        title="A title",
    )


def test_document_has_the_compact_camel_case_shape() -> None:
    assert to_document(sample()) == {
        "id": "mcp:oid-1:conv.1",
        "oid": "oid-1",
        "tid": "tenant-1",
        "conversationId": "conv.1",
        "createdAt": NOW - 100,
        "updatedAt": NOW,
        "expiresAt": NOW + 3600,
        "version": 4,
        "dropped": 2,
        "instructions": "Be brief.",
        "title": "A title",
        "turnCount": 4,
        "turns": [
            {"n": 3, "q": "q3", "a": "a3", "at": NOW - 50},
            {"n": 4, "q": "q4 ✓", "a": "a4 🔨", "at": NOW, "rid": "req-4", "digest": "sha256:d4"},
        ],
    }


def test_round_trip_is_exact_through_json_text() -> None:
    c = sample()
    assert from_document(json.loads(json.dumps(to_document(c)))) == c


def test_round_trip_keeps_absent_optional_fields_absent() -> None:
    c = Conversation("oid-1", "tenant-1", "c", NOW, NOW, NOW + 1, turns=(Turn(1, "q", "a", NOW, None, "d"),))
    back = from_document(json.loads(json.dumps(to_document(c))))
    assert back == c
    assert back.instructions is None and back.title is None
    assert back.turns[0].client_request_id is None and back.turns[0].request_digest == "d"


def test_a_turns_sources_are_kept_and_a_turn_without_them_reads_back_without() -> None:
    cited = Turn(1, "q", "a", NOW, sources=("guide/setup.md", "faq.md"))
    none_cited = Turn(2, "q", "a", NOW, sources=())
    old = Turn(3, "q", "a", NOW)
    c = Conversation("oid-1", "tenant-1", "c", NOW, NOW, NOW + 1, turns=(cited, none_cited, old))
    document = to_document(c)
    assert [turn.get("src") for turn in document["turns"]] == [["guide/setup.md", "faq.md"], [], None]
    back = from_document(json.loads(json.dumps(document)))
    assert [turn.sources for turn in back.turns] == [("guide/setup.md", "faq.md"), (), None]


def test_empty_conversation_round_trips() -> None:
    c = Conversation("oid-1", "tenant-1", "c", NOW, NOW, NOW + 1)
    assert from_document(to_document(c)) == c


def test_unknown_keys_such_as_cosmos_system_properties_are_ignored() -> None:
    doc = to_document(sample()) | {"_etag": '"0a00"', "_ts": 1700000000, "_rid": "x", "_self": "y"}
    assert from_document(doc) == sample()


def test_whole_number_times_read_back_as_floats() -> None:
    # A JSON store may hand back 1700000000.0 as the integer 1700000000.
    doc = to_document(sample()) | {"createdAt": 1_700_000_000}
    doc["turns"][0]["at"] = 1_699_999_999
    c = from_document(doc)
    assert isinstance(c.created_at, float) and isinstance(c.turns[0].at, float)


def conversations() -> list[Conversation]:
    with_usage = Turn(9, "q", "a", NOW, "req-9", "d9", input_tokens=120, output_tokens=45)
    return [
        sample(),
        Conversation("oid-1", "tenant-1", "c", NOW, NOW, NOW + 1),
        Conversation("oid-1", "tenant-1", "c", NOW, NOW, NOW + 1, turns=(with_usage,), title='"quoted" \\'),
        Conversation("o", "t", "c", 1.0, 2.0, 3.0, turns=(Turn(1, "\u2028 line\nbreak\t", "\x00", 1),)),
    ]


@pytest.mark.parametrize("c", conversations())
def test_the_text_a_store_writes_reads_back_as_the_same_conversation(c: Conversation) -> None:
    text = pydantic_core.to_json(to_document(c)).decode()
    assert json.loads(text) == to_document(c)
    assert from_document(pydantic_core.from_json(text)) == c
