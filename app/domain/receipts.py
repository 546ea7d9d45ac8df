"""clientRequestId receipts: a retry of a turn already written gets that turn's result back
instead of a second turn, and a key reused with other arguments is refused."""

from __future__ import annotations

import hashlib
import json

from app.domain.ask_types import AskRequest, AskResult
from app.domain.conversation import CONVERSATION_ID_RULE, Conversation, Turn
from app.domain.ports import Usage
from app.errors import Conflict

CLIENT_REQUEST_ID_RULE = CONVERSATION_ID_RULE.replace("conversationId", "clientRequestId")


def request_digest(request: AskRequest) -> str:
    """A digest of the arguments a retry must repeat to be replayed."""
    payload = json.dumps(
        [request.question, request.conversation_id, request.instructions], separators=(",", ":")
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def find_receipt(stored: Conversation, request: AskRequest, digest: str | None) -> AskResult | None:
    """The earlier result of this `clientRequestId`, or None; refuses a key reused with other arguments."""
    if request.client_request_id is None:
        return None
    for turn in stored.turns:
        if turn.client_request_id != request.client_request_id:
            continue
        if turn.request_digest != digest:
            raise Conflict(
                f"clientRequestId {request.client_request_id!r} was already used with other arguments "
                f"in conversation {stored.conversation_id!r}: use a new clientRequestId for a new question."
            )
        return AskResult(
            answer=turn.answer,
            conversation_id=stored.conversation_id,
            note=(
                f"Replayed: clientRequestId {request.client_request_id!r} was already answered as turn "
                f"{turn.number}; nothing was appended."
            ),
            # The turn created the conversation unless start_conversation did so before it.
            created=turn.number == 1 and turn.at == stored.created_at,
            turn=turn.number,
            condensed=stored.dropped > 0,
            sources=(),
            usage=usage_of(turn),
            outcome="replayed",
        )
    return None


def usage_of(turn: Turn) -> Usage | None:
    """The token usage stored with `turn`, if a model answered it."""
    if turn.input_tokens is None or turn.output_tokens is None:
        return None
    return Usage(turn.input_tokens, turn.output_tokens)
