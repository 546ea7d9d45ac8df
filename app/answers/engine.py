"""The port every answer engine implements, and the values it exchanges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class PastExchange(Protocol):
    """An earlier question and its answer: an `Exchange`, or a stored turn handed over as is."""

    @property
    def question(self) -> str: ...

    @property
    def answer(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Exchange:
    """An earlier question and answer of the conversation, oldest first when in a sequence."""

    question: str
    answer: str


@dataclass(frozen=True, slots=True)
class Passage:
    """A ranked piece of the corpus: the file it comes from (relative path), its heading and text."""

    source: str
    heading: str
    text: str
    score: float


@dataclass(frozen=True, slots=True)
class Answer:
    """What an engine answered, with the passages it drew on (empty when none)."""

    text: str
    sources: tuple[Passage, ...] = ()


class AnswerEngine(Protocol):
    """Turns a question into an answer; may use earlier turns and the conversation's instructions."""

    name: str

    async def answer(
        self, question: str, history: Sequence[PastExchange], instructions: str | None = None
    ) -> Answer:
        """Answer `question`. `history` holds the conversation's earlier turns, oldest first."""
        ...

    async def search(self, text: str, max_results: int) -> list[Passage]:
        """The passages that best match `text`, best first, at most `max_results`."""
        ...
