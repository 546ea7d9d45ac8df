"""The one test double of the `AnswerEngine` port: it records each call, answers from a script
(answers or exceptions, in order) and otherwise like `EchoEngine`, and can be made to let other
tasks run, or to wait on a gate, before it answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import anyio.lowlevel

from app.domain.ports import Answer, PastExchange, Progress
from app.engines.echo import EchoEngine
from support.exchange import Exchange


@dataclass(frozen=True)
class EngineCall:
    """What one `answer` call was given."""

    question: str
    history: tuple[Exchange, ...]
    instructions: str | None
    progress: Progress | None = None


class ScriptedEngine:
    """An `AnswerEngine` whose answers a test chooses, and which records what it was asked.

    `script` is answered (an `Answer`) or raised (an exception) once each, in order; once it
    runs out, the answer is the echo `EchoEngine` gives. With `yielding`, each call first lets
    other tasks run (so concurrent asks interleave); while `gate` is an event not yet set, each
    call waits on it before answering, so a test can act while answers are being written.
    """

    def __init__(
        self,
        *script: Answer | Exception,
        name: str = "scripted",
        yielding: bool = False,
        gate: anyio.Event | None = None,
    ) -> None:
        self.name = name
        #: Every call, in the order it began (so before it waits or answers).
        self.calls: list[EngineCall] = []
        #: What the next calls answer or raise, in order, before the echo takes over.
        self.script: list[Answer | Exception] = list(script)
        self.yielding = yielding
        self.gate = gate

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        past = tuple(Exchange(h.question, h.answer, h.sources) for h in history)
        self.calls.append(EngineCall(question, past, instructions, progress))
        if self.yielding:
            await anyio.lowlevel.checkpoint()
        if self.gate is not None:
            await self.gate.wait()
        if self.script:
            scripted = self.script.pop(0)
            if isinstance(scripted, Exception):
                raise scripted
            return scripted
        return await EchoEngine().answer(question, history, instructions)

    async def wait_for_calls(self, count: int) -> None:
        """Return once `count` calls have begun (behind a closed gate: are waiting at it)."""
        while len(self.calls) < count:
            await anyio.lowlevel.checkpoint()
