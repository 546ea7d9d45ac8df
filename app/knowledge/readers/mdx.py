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

Where each `{` closes and where each run of backticks is closed are found in one pass over the
prose and looked up (`_Closers`), never searched for again from each opener: a run of `{` that
never closes, or of backtick runs that never close, is read in time linear in its length.
"""

from __future__ import annotations

import bisect
import re

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_ESM = re.compile(r"^(?:import|export)\s")
_TICKS = re.compile(r"`+")
_BLANK_LINE = re.compile(r"(?=\n[ \t]*\n)")
_BRACES = re.compile(r"\\.|[{}]", re.S)
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
    closers = _Closers(prose)
    out: list[str] = []
    text: list[str] = []
    position = 0
    while (found := _SPECIAL.search(prose, position)) is not None:
        start = found.start()
        text.append(prose[position:start])
        char = found.group()
        if char == "\\":
            text.append(prose[start : start + 2])
            position = start + 2
        elif char == "{":
            end = closers.brace(start)
            if end is None:
                text.append(char)
                position = found.end()
            else:
                position = end
        elif (end := closers.span(start)) is not None:
            out.extend([_TAG.sub("", "".join(text)), prose[start:end]])
            text.clear()
            position = end
        else:
            # A backtick run with no closing run is text, as CommonMark reads it.
            run = _TICKS.match(prose, start)
            text.append(run.group() if run else char)
            position = start + len(text[-1])
    text.append(prose[position:])
    out.append(_TAG.sub("", "".join(text)))
    return "".join(out)


class _Closers:
    """Where each `{` of a text closes, and where each backtick run that opens a code span is
    closed, found in one pass over it (see the module)."""

    def __init__(self, text: str) -> None:
        self._braces: dict[int, int] = {}
        open_braces: list[int] = []
        for found in _BRACES.finditer(text):
            if found.group() == "{":
                open_braces.append(found.start())
            elif found.group() == "}" and open_braces:
                self._braces[open_braces.pop()] = found.end()
        self._runs: dict[int, int] = {}  # start -> length of every whole run of backticks
        self._starts: dict[int, list[int]] = {}  # length -> starts of the runs that long
        for found in _TICKS.finditer(text):
            length = found.end() - found.start()
            self._runs[found.start()] = length
            self._starts.setdefault(length, []).append(found.start())
        self._blank = [found.start() for found in _BLANK_LINE.finditer(text)]

    def brace(self, start: int) -> int | None:
        """Where the `{...}` expression opening at `start` ends; None when it never closes."""
        return self._braces.get(start)

    def span(self, start: int) -> int | None:
        """Where the code span opened by the whole backtick run at `start` ends: after the next
        run of as many backticks, before a blank line; None when there is none."""
        length = self._runs.get(start)
        if length is None:
            return None
        same = self._starts[length]
        closer = bisect.bisect_right(same, start)
        if closer == len(same):
            return None
        blank = bisect.bisect_left(self._blank, start + length)
        if blank < len(self._blank) and self._blank[blank] < same[closer]:
            return None
        return same[closer] + length
