"""Conversation history for engine tests, without a store."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Exchange:
    """An earlier question and its answer (what an engine is given of a stored turn)."""

    question: str
    answer: str
    #: The files the answer cited (None: not known, as for a turn kept before they were).
    sources: tuple[str, ...] | None = None
