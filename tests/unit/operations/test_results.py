"""Wire shapes built by hand stay exactly what their models would dump."""

from __future__ import annotations

from app.domain.ask_types import AskResult
from app.domain.ports import Passage
from app.operations.results import AskOutput

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
            Passage("docs/a.md", "Heading", "text", 12.345678, url="https://x/a#heading", title="A"),
            Passage("docs/b.md", "Other", "text", 0.00004),
            Passage("docs/a.md", "Heading > More", "text", 9.0, url="https://x/a#more", title="A"),
        ),
    ),
}


def test_ask_content_carries_every_field_with_scores_rounded() -> None:
    content = AskOutput.of(RESULTS["condensed, with sources"]).model_dump(mode="json")
    assert content == {
        "answer": "cited",
        "conversationId": "conv-2",
        "note": "2 older turns were dropped.",
        "created": False,
        "turn": 52,
        "condensed": True,
        # One entry a page, in the order of its best passage, its sections inside.
        "sources": [
            {
                "source": "docs/a.md",
                "title": "A",
                "heading": "Heading",
                "score": 12.3457,
                "url": "https://x/a#heading",
                "sections": [
                    {"heading": "Heading", "url": "https://x/a#heading"},
                    {"heading": "Heading > More", "url": "https://x/a#more"},
                ],
            },
            {
                "source": "docs/b.md",
                "title": None,
                "heading": "Other",
                "score": 0.0,
                "url": None,
                "sections": [{"heading": "Other", "url": None}],
            },
        ],
        "usage": None,
    }
    assert AskOutput.of(RESULTS["one-shot"]).model_dump(mode="json")["conversationId"] is None


def test_every_text_argument_refuses_text_that_is_not_valid_unicode() -> None:
    from pydantic import BaseModel, ValidationError

    from app.operations.catalog import OPERATIONS

    checked = 0
    for operation in OPERATIONS:
        model: type[BaseModel] = operation.arguments
        for name, field in model.model_fields.items():
            if "str" not in str(field.annotation):
                continue
            wire = field.alias or name
            try:
                model.model_validate({wire: "a\ud800"})
            except ValidationError as error:
                kinds = {(e["loc"][0], e["type"]) for e in error.errors()}
                assert (wire, "string_unicode") in kinds, (operation.name, wire, kinds)
            else:
                raise AssertionError(f"{operation.name}.{wire} accepted an unpaired surrogate")
            checked += 1
    assert checked >= 10
