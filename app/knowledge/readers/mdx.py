"""MDX syntax taken out of a document so that markdown-it can read the rest as CommonMark.

markdown-it knows no MDX, so an `.mdx` file goes through three small rules before it is parsed,
each applied outside code only:

- ESM: an `import` or `export` statement at the start of a line is dropped, up to the line where
  its brackets balance (MDX ends such a statement at a blank line at the latest).
- Expressions: a balanced `{...}` is dropped, comments `{/* ... */}` included; `\\{` is a brace.
- JSX: tags (`<Note>`, `</Note>`, `<Tabs.Item value="a" />`, fragments `<>` and `</>`) are
  dropped, so the prose between an opening and a closing tag stays, to be read as Markdown.

Code is found the way MDX finds it, since markdown-it has not run yet: a fence of three or more
backticks or tildes opens at any indentation (MDX has no indented code, so a fence inside an
indented component is still a fence) and closes with a like run; a code span is a run of
backticks closed by a run of the same length within one paragraph.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_ESM = re.compile(r"^(?:import|export)\s")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n).)*?(?<!`)\1(?!`)", re.S)
# A JSX tag: a name as JSX spells it (`Tabs.Item`, `svg:path`), attributes (any line breaks
# included; expressions in them are gone by now), or an empty fragment tag.
_TAG = re.compile(r"</?[A-Za-z][\w.:-]*(?:\s[^<>]*?)?/?>|<>|</>")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_SPECIAL = re.compile(r"[\\`{]")


def strip_mdx(text: str) -> str:
    """`text` without its ESM statements, `{...}` expressions and JSX tags; code as written."""
    out: list[str] = []
    prose: list[str] = []

    def flush() -> None:
        if prose:
            out.extend(_clean("\n".join(prose)).split("\n"))
            prose.clear()

    lines = text.split("\n")
    fence = ""
    n = 0
    while n < len(lines):
        line = lines[n]
        if fence:
            stripped = line.strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = ""
            out.append(line)
        elif opening := _FENCE.match(line):
            flush()
            fence = opening.group(1)
            out.append(line)
        elif _ESM.match(line):
            n = _esm_end(lines, n)
            prose.append("")
            continue
        else:
            prose.append(line)
        n += 1
    flush()
    return "\n".join(out)


def _esm_end(lines: list[str], start: int) -> int:
    """The line after the ESM statement that starts at line `start`."""
    depth = 0
    n = start
    while n < len(lines):
        line = lines[n]
        if n > start and not line.strip():
            return n
        for char in line:
            if char in _OPEN:
                depth += 1
            elif char in _OPEN.values():
                depth -= 1
        n += 1
        if depth <= 0:
            return n
    return n


def _clean(prose: str) -> str:
    """Prose without expressions and tags, read left to right: a code span met first is kept
    as written (`{...}` in it is code), an expression met first is dropped whole (backticks in
    it are JavaScript's)."""
    out: list[str] = []
    text: list[str] = []
    position = 0
    while (found := _SPECIAL.search(prose, position)) is not None:
        text.append(prose[position : found.start()])
        char = found.group()
        if char == "\\":
            text.append(prose[found.start() : found.start() + 2])
            position = found.start() + 2
        elif char == "{":
            end = _expression_end(prose, found.start())
            if end is None:
                text.append(char)
                position = found.end()
            else:
                position = end
        elif span := _CODE_SPAN.match(prose, found.start()):
            out.extend([_TAG.sub("", "".join(text)), span.group()])
            text.clear()
            position = span.end()
        else:
            # A backtick run with no closing run is text, as CommonMark reads it.
            run = re.match(r"`+", prose[found.start() :])
            text.append(run.group() if run else char)
            position = found.start() + len(text[-1])
    text.append(prose[position:])
    out.append(_TAG.sub("", "".join(text)))
    return "".join(out)


def _expression_end(text: str, start: int) -> int | None:
    """Where the `{...}` expression opening at `start` ends; None when it never closes."""
    depth = 0
    escaped = False
    for i in range(start, len(text)):
        char = text[i]
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None
