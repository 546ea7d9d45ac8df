"""Every reader's work is linear in its input: each input that made one quadratic (or silently
dropped text), read and cut into passages at two sizes, costs at most about twice the work and
writes at most about twice the text at twice the size. Work is counted (lines of Python run,
every library's included: `support.work`), never timed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.work import LINEAR, growth, lines_run

from app.knowledge.corpus import CorpusPassage, file_passages
from app.knowledge.readers.documents import read_document


def ticks(size: int) -> str:
    """Runs of backticks, each one longer than the last, none ever closed: `size` characters."""
    runs: list[str] = []
    length = 0
    while sum(map(len, runs)) < size:
        length += 1
        runs.append("`" * length + " x ")
    return "# Ticks\n\n" + "".join(runs) + "\n"


SECTION = "## Section {n}\n\nSome words about the thing, with `code`, *emphasis* and a [link](https://x.example).\n\n"

# What made a reader slow, by format: (the document of size n, its name, n).
CASES: dict[str, tuple[Callable[[int], str], str, int]] = {
    "html: lists left open in lists": (lambda n: "<html><body>" + "<ul><li>item " * n, "a.html", 1000),
    "html: code left open in code": (lambda n: "<p>" + "<code>x " * n, "a.html", 1000),
    "html: tables left open in cells": (lambda n: "<table><tr><td>x " * n, "a.html", 500),
    "html: elements left open in elements": (
        lambda n: "<p><button>" + "<span>" * n + "<div>x" * n,
        "a.html",
        500,
    ),
    "mdx: a run of {": (lambda n: "# Braces\n\n" + "{" * n + "\n", "a.mdx", 5000),
    "mdx: backtick runs that never close": (ticks, "a.mdx", 20_000),
    "markdown: one large file": (lambda n: "".join(SECTION.format(n=i) for i in range(n)), "a.md", 150),
    "markdown: quotes in quotes": (lambda n: ">" * n + " deep\n", "a.md", 5000),
    "markdown: lists in lists": (lambda n: "- " * n + "deep\n", "a.md", 2000),
    "markdown: processing instructions never closed": (lambda n: "# T\n\n" + "<?" * n + "\n", "a.md", 5000),
    "markdown: declarations never closed": (lambda n: "# T\n\n" + "<!A" * n + "\n", "a.md", 5000),
    "markdown: CDATA never closed": (lambda n: "# T\n\n" + "<![CDATA[" * n + "\n", "a.md", 3000),
    "markdown: a heading of spaces": (lambda n: "# a" + " " * n + "b {#id}\n", "a.md", 20_000),
    "markdown: template tags on one line": (lambda n: "# T\n\n" + 'a {% x "y" %} `b` ' * n, "a.md", 2000),
    "markdown: template tags never closed": (lambda n: "# T\n\n" + "{% " * n + "\n", "a.md", 5000),
    "markdown: unresolved references among backtick runs": (
        lambda n: "# T\n\n" + "[`a`][] ``b` [c][d] " * n + "\n",
        "a.md",
        2000,
    ),
    "markdown: raw tags never closed": (lambda n: "# T\n\n" + "{% raw %} endraw " * n + "\n", "a.md", 2000),
    "rst: lists in lists": (lambda n: "".join("  " * i + f"- item {i}\n\n" for i in range(n)), "a.rst", 40),
    "rst: a long document": (
        lambda n: "".join(f"Part {i}\n=======\n\nSome words.\n\n" for i in range(n)),
        "a.rst",
        100,
    ),
    "rst: one long paragraph": (lambda n: "Title\n=====\n\n" + "word and more words\n" * n, "a.rst", 1000),
    "txt: one long line": (lambda n: "word " * n + "\n", "a.txt", 20_000),
    "txt: many lines": (lambda n: "A line of text.\n" * n, "a.txt", 5000),
}


def read_and_cut(text: str, source: str) -> tuple[int, int]:
    """The work of reading `text` as `source` and cutting it into passages, and the characters
    that writes (the document's text and its passages')."""
    work, (written, passages) = lines_run(lambda: _read_and_cut(text, source))
    return work, len(written) + sum(len(p.heading) + len(p.text) for p in passages)


def _read_and_cut(text: str, source: str) -> tuple[str, list[CorpusPassage]]:
    file = read_document(text, source)
    return file.text, file_passages(file)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_twice_the_input_is_at_most_about_twice_the_work_and_the_text(case: str) -> None:
    make, source, n = CASES[case]
    small_work, small_text = read_and_cut(make(n), source)
    large_work, large_text = read_and_cut(make(2 * n), source)
    assert growth(small_work, large_work) <= LINEAR, (small_work, large_work)
    assert growth(small_text, large_text) <= LINEAR, (small_text, large_text)
