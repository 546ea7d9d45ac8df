"""Wire shapes built by hand stay exactly what their models would dump."""

from __future__ import annotations

import pytest

from app.api.schemas import AskOutput
from app.domain.ask import AskResult
from app.ports import Passage

RESULTS = {
    "one-shot": AskResult("Echo: q", None, "No conversationId was given.", False, None, False, ()),
    "a turn": AskResult("answer ✓ 日本", "conv-1", None, True, 1, False, ()),
    "condensed, with sources": AskResult(
        "cited",
        "conv-2",
        "2 older turns were dropped.",
        False,
        52,
        True,
        (
            Passage("docs/a.md", "Heading", "text", 12.345678),
            Passage("docs/b.md", "Other", "text", 0.00004),
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(RESULTS))
def test_ask_content_is_the_models_dump(case: str) -> None:
    result = RESULTS[case]
    content = AskOutput.content(result)
    assert content == AskOutput.of(result).model_dump(mode="json")
    assert list(content) == list(AskOutput.model_fields)
    assert AskOutput.model_validate(content).model_dump(mode="json") == content


def test_ask_content_carries_every_field_with_scores_rounded() -> None:
    content = AskOutput.content(RESULTS["condensed, with sources"])
    assert content == {
        "answer": "cited",
        "conversationId": "conv-2",
        "note": "2 older turns were dropped.",
        "created": False,
        "turn": 52,
        "condensed": True,
        "sources": [
            {"source": "docs/a.md", "heading": "Heading", "score": 12.3457},
            {"source": "docs/b.md", "heading": "Other", "score": 0.0},
        ],
    }
    assert AskOutput.content(RESULTS["one-shot"])["conversationId"] is None
