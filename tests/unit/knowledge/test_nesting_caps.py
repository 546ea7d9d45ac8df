"""Where a reader stops following nesting, and what it does past it: lists deeper than
`MAX_LIST_DEPTH` and HTML elements deeper than `MAX_DEPTH` are read as text, and so are Markdown
blocks deeper than the parser reads (it used to drop them without a word); nothing is lost, and
one warning says so."""

from __future__ import annotations

import pytest

from app.knowledge.corpus import file_passages
from app.knowledge.readers import html as html_reader
from app.knowledge.readers.documents import read_document
from app.knowledge.readers.markdown_render import TOO_DEEP_WARNING
from app.knowledge.readers.markup import DEEP_LISTS_WARNING, MAX_LIST_DEPTH


def read(text: str, source: str) -> tuple[str, list[str]]:
    """All the text `source` is read and cut into, and what was warned of."""
    warned: list[str] = []
    file = read_document(text, source, warn=warned.append)
    passages = file_passages(file, warn=warned.append)
    return "\n".join([file.text, *(p.text for p in passages)]), warned


def nested_items(depth: int) -> str:
    return "".join(f"<ul><li>item{level} " for level in range(depth)) + "</ul>" * depth


def test_html_lists_past_the_cap_are_lines_of_the_deepest_item_with_one_warning() -> None:
    text, warned = read(nested_items(MAX_LIST_DEPTH + 4), "a.html")
    assert all(f"item{level}" in text for level in range(MAX_LIST_DEPTH + 4))
    deepest = " " * 2 * (MAX_LIST_DEPTH - 1)
    assert f"\n{deepest}- item{MAX_LIST_DEPTH - 1}\n{deepest}  item{MAX_LIST_DEPTH}\n" in text
    assert warned == [DEEP_LISTS_WARNING]


def test_html_lists_within_the_cap_are_read_as_they_nest_without_a_warning() -> None:
    text, warned = read(nested_items(MAX_LIST_DEPTH), "a.html")
    assert f"{' ' * 2 * (MAX_LIST_DEPTH - 1)}- item{MAX_LIST_DEPTH - 1}" in text and warned == []


def test_html_elements_past_the_cap_are_text_and_what_is_left_out_stays_out() -> None:
    depth = html_reader.MAX_DEPTH + 50
    page = (
        "<html><body>" + "<div>" * depth + "<p>deep words</p><script>var hidden = 1;</script>"
        "<span hidden>secret</span><h2>Not a heading</h2>" + "</div>" * depth + "<p>after</p>"
    )
    text, warned = read(page, "a.html")
    assert "deep words" in text and "Not a heading" in text and "after" in text
    assert "hidden" not in text and "secret" not in text and "## Not a heading" not in text
    assert warned == [html_reader.DEEP_ELEMENTS_WARNING]


@pytest.mark.parametrize(
    "document",
    [
        "> " * 30 + "deep words\n\nafter\n",
        "- " * 15 + "deep words\n\nafter\n",
        "> - " * 12 + "deep words\n",
    ],
    ids=["quotes", "lists", "both"],
)
def test_markdown_nested_deeper_than_the_parser_reads_is_text_not_dropped(document: str) -> None:
    text, warned = read(document, "a.md")
    assert "deep words" in text
    assert warned == [TOO_DEEP_WARNING]


def test_markdown_nested_as_deep_as_the_parser_reads_is_read_without_a_warning() -> None:
    text, warned = read("> " * 10 + "words\n", "a.md")
    assert "words" in text and warned == []


def test_rst_lists_past_the_cap_are_text_with_one_warning() -> None:
    document = "".join("  " * level + f"- item{level}\n\n" for level in range(MAX_LIST_DEPTH + 3))
    text, warned = read(document, "a.rst")
    assert all(f"item{level}" in text for level in range(MAX_LIST_DEPTH + 3))
    assert warned == [DEEP_LISTS_WARNING]
