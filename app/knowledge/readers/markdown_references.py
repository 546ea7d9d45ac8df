"""Reference links a Markdown parser could not resolve, which would show their brackets.

CommonMark takes a link reference definition (`[label]: url`) only when its label holds no
unescaped bracket. Node.js-style pages write labels such as
``[`request(options[, callback])`]: api.md#request``: that definition and every one after it in
the same block are left as a paragraph of text, and a link that refers to one of them
(``[`Dispatcher`][]``) as its brackets. A page shows neither, so neither is kept:

- a paragraph whose every line is such a definition is left out (`only_definitions`);
- an unresolved reference link, `[text][]` or `[text][label]`, is its text (`resolve`).

Both are linear: code spans (whose brackets are code) are told from text by `markup.code_spans`,
which pairs backtick runs once, left to right.
"""

from __future__ import annotations

import re

from app.knowledge.readers.markup import code_spans

_DEFINITION = re.compile(r" {0,3}\[[^\n]*\]:[ \t]*\S[^\n]*")
# `[text][label]` not right after a word, a `]` or a backslash (`a[0][1]` is an index).
_REFERENCE = re.compile(r"(?<![\w\]\\])\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")


def only_definitions(source: str) -> bool:
    """Whether a paragraph's source is link reference definitions and nothing else."""
    lines = [line for line in source.split("\n") if line.strip()]
    return bool(lines) and all(_DEFINITION.fullmatch(line) for line in lines)


def resolve(text: str) -> str:
    """`text` (a paragraph as written back) with each reference link left unresolved as its
    text; brackets inside code spans are code and stay."""
    if "][" not in text:
        return text
    masked = _masked(text)
    out: list[str] = []
    at = 0
    for match in _REFERENCE.finditer(masked):
        out.extend([text[at : match.start()], text[match.start(1) : match.end(1)]])
        at = match.end()
    out.append(text[at:])
    return "".join(out)


def _masked(text: str) -> str:
    """`text` with every code span blanked out, so that no bracket inside one is read."""
    spans = code_spans(text)
    if not spans:
        return text
    pieces: list[str] = []
    at = 0
    for start, end in spans:
        pieces.extend([text[at:start], "\0" * (end - start)])
        at = end
    pieces.append(text[at:])
    return "".join(pieces)
