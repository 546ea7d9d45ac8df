"""What a caller asks and the envelope every surface returns for it: shared by AskService and
the receipts that replay an answer."""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.ports import Passage, Usage


@dataclass(frozen=True, slots=True)
class AskRequest:
    """What a caller asks; field meanings follow the `ask` tool's arguments."""

    question: str
    conversation_id: str | None = None
    instructions: str | None = None
    client_request_id: str | None = None


@dataclass(frozen=True, slots=True)
class AskResult:
    """The envelope every surface returns for `ask`, with its `outcome`: what telemetry counts."""

    answer: str
    conversation_id: str | None
    note: str | None
    created: bool
    turn: int | None
    condensed: bool
    sources: tuple[Passage, ...]
    #: The language model's token usage for this answer; None when no model was called.
    usage: Usage | None = None
    outcome: str = "one_shot"  # or "created", "continued", "replayed" (never in the tool's result)
