"""A deterministic engine with no corpus, for tests and benchmarks of everything around it."""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.ports import Answer, PastExchange, Progress


class EchoEngine:
    """Repeats the question, showing the turn number, previous question and instructions it saw."""

    name = "echo"

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        """`Echo: {question}`, plus the turn and previous question when there is history."""
        text = f"Echo: {question}"
        if history:
            text += f" (turn {len(history) + 1}; previous question: {history[-1].question})"
        if instructions is not None:
            text += f" [instructions: {instructions}]"
        return Answer(text=text)
