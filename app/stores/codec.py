"""The JSON document a stored conversation becomes, shared by the SQLite and Cosmos DB stores.

Keys are short camelCase so documents stay compact and read naturally in Cosmos DB; `id` is
the conversation key because Cosmos DB requires an `id` and point reads use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pydantic_core

from app.domain.conversation import Conversation, Turn


def to_document(c: Conversation) -> dict[str, Any]:
    """The JSON-ready document for `c`; `from_document` turns it back into an equal value."""
    return {**_header(c), "turns": [_turn_document(t) for t in c.turns]}


def encode_turn(t: Turn) -> str:
    """One entry of the document's `turns`, as JSON text."""
    return pydantic_core.to_json(_turn_document(t)).decode()


def encode_document(c: Conversation, turns: Sequence[str]) -> str:
    """`to_document(c)` as JSON text, given its turns already encoded by `encode_turn`: a store
    that keeps the encoded turns of what it last wrote encodes only the new turn on the next write."""
    header = pydantic_core.to_json(_header(c)).decode()
    return f'{header[:-1]},"turns":[{",".join(turns)}]}}'


def _header(c: Conversation) -> dict[str, Any]:
    return {
        "id": c.key,
        "oid": c.oid,
        "tid": c.tid,
        "conversationId": c.conversation_id,
        "createdAt": c.created_at,
        "updatedAt": c.updated_at,
        "expiresAt": c.expires_at,
        "version": c.version,
        "dropped": c.dropped,
        "instructions": c.instructions,
        "title": c.title,
        # Derived, but stored so a listing can read it without loading every turn.
        "turnCount": c.turn_count,
    }


def from_document(d: Mapping[str, Any]) -> Conversation:
    """The conversation stored in `d`; keys it does not know (`_etag`, `_ts`, ...) are ignored.

    Numbers are coerced because a JSON round trip may turn `1.0` into `1` and back.
    """
    return Conversation(
        oid=d["oid"],
        tid=d["tid"],
        conversation_id=d["conversationId"],
        created_at=float(d["createdAt"]),
        updated_at=float(d["updatedAt"]),
        expires_at=float(d["expiresAt"]),
        version=int(d["version"]),
        dropped=int(d["dropped"]),
        instructions=d.get("instructions"),
        title=d.get("title"),
        turns=tuple(_turn_from_document(t) for t in d["turns"]),
    )


def _turn_document(t: Turn) -> dict[str, Any]:
    doc: dict[str, Any] = {"n": t.number, "q": t.question, "a": t.answer, "at": t.at}
    # Most turns carry no retry key; leaving the keys out keeps long conversations small.
    if t.client_request_id is not None:
        doc["rid"] = t.client_request_id
    if t.request_digest is not None:
        doc["digest"] = t.request_digest
    if t.input_tokens is not None:
        doc["tin"] = t.input_tokens
    if t.output_tokens is not None:
        doc["tout"] = t.output_tokens
    if t.sources is not None:
        doc["src"] = list(t.sources)
    return doc


def _turn_from_document(d: Mapping[str, Any]) -> Turn:
    # Positional: this runs once per stored turn on every read, so it is worth keeping lean.
    return Turn(
        int(d["n"]),
        d["q"],
        d["a"],
        float(d["at"]),
        d.get("rid"),
        d.get("digest"),
        d.get("tin"),
        d.get("tout"),
        None if (sources := d.get("src")) is None else tuple(sources),
    )
