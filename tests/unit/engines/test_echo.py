"""The echo engine: a deterministic stand-in for tests and benchmarks."""

from __future__ import annotations

import pytest
from support.exchange import Exchange

from app.domain.ports import Answer, AnswerEngine
from app.engines.echo import EchoEngine

pytestmark = pytest.mark.anyio


async def test_first_turn_echoes_the_question() -> None:
    engine: AnswerEngine = EchoEngine()

    assert engine.name == "echo"
    assert await engine.answer("Hello?", []) == Answer(text="Echo: Hello?")


async def test_later_turns_show_turn_number_and_previous_question() -> None:
    history = [Exchange("first", "Echo: first"), Exchange("second", "Echo: second")]

    answer = await EchoEngine().answer("third", history)

    assert answer.text == "Echo: third (turn 3; previous question: second)"
    assert answer.sources == ()


async def test_instructions_are_appended() -> None:
    history = [Exchange("first", "Echo: first")]

    answer = await EchoEngine().answer("again", history, instructions="Be brief.")

    assert answer.text == "Echo: again (turn 2; previous question: first) [instructions: Be brief.]"
