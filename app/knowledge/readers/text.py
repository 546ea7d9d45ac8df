"""Plain text documents (`.txt`): their text as written, kept from reading as Markdown, with the
headings a reader sees in it: a line underlined (and perhaps overlined) with `=`, `-`, `~` and
the like."""

from __future__ import annotations

import re

from app.knowledge.corpus import CorpusFile
from app.knowledge.readers.markup import file_name, plain_line, shorten

#: A title taken from a line of plain text is cut to this many characters.
MAX_TITLE_CHARS = 80
#: A line longer than this is a paragraph, not a heading, whatever underlines it.
MAX_HEADING_CHARS = 120
#: Characters of a heading's underline (and overline).
UNDERLINES = frozenset("=-~^*#+")

_TAG_START = re.compile(r"<(?=[A-Za-z/!?>])")


def read_text(text: str, source: str) -> CorpusFile:
    """A plain text file: its text as written, titled by its first non-empty line (the heading's
    text when that line is a heading's overline).

    A line that starts the text or follows a blank line, underlined by a line of one of
    `UNDERLINES` at least about as long as it (three at the least; `Install\\n-------`), and
    perhaps overlined by the same, is a heading: its level is the order in which its style
    (character, overlined or not) first appears, as in reStructuredText, deeper than 4 read as 4.
    Otherwise it has no Markdown headings: a line that Markdown would read as the start of a block
    (a heading, a setext underline, a code fence, an admonition marker, a link definition) gets a
    backslash before its first character, and so does a `<` that would start an HTML tag, so that
    the text stays text.
    """
    text = text.removeprefix("\ufeff")
    lines_in = text.split("\n")
    headings = _headings(lines_in)
    first = next((n for n, line in enumerate(lines_in) if line.strip()), None)
    heading = None if first is None else headings.get(first) or headings.get(first + 1)
    title_line = lines_in[first] if first is not None else ""
    if heading is not None:
        title_line = lines_in[heading[1]]
    title = shorten(title_line, MAX_TITLE_CHARS) or file_name(source)
    lines: list[str] = []
    code = False  # in an indented code block, whose text Markdown takes as it is
    skip = 0
    for n, line in enumerate(lines_in):
        if skip:
            skip -= 1
            continue
        found = headings.get(n)
        if found is not None:  # its lines are indented less than code is
            level, at, count = found
            code = False
            words = _TAG_START.sub(r"\\<", " ".join(lines_in[at].split()))
            lines.append(f"{'#' * level} {words}")
            skip = count - 1
            continue
        indented = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip()) >= 4 and bool(line.strip())
        code = (indented and (code or not lines or not lines[-1].strip())) or (code and not line.strip())
        lines.append(line if code else plain_line(_TAG_START.sub(r"\\<", line), lists=False))
    return CorpusFile(source=source, title=title, text="\n".join(lines))


def _headings(lines: list[str]) -> dict[int, tuple[int, int, int]]:
    """The headings of `lines`: for the first line of each (its overline, else its text), its
    level, the number of its text line and how many lines it takes."""
    styles: list[tuple[str, bool]] = []
    found: dict[int, tuple[int, int, int]] = {}
    n = 0
    while n + 1 < len(lines):
        title, under = lines[n], lines[n + 1]
        after_blank = n == 0 or not lines[n - 1].strip()
        rule = _rule(under)
        # An underline as long as its text, give or take two characters (few count them).
        if rule and after_blank and _heading_text(title) and len(under.strip()) + 2 >= len(title.strip()):
            style, count = (rule, False), 2
        elif after_blank and (over := _rule(title)) and n + 2 < len(lines) and _heading_text(under):
            if _rule(lines[n + 2]) != over:
                n += 1
                continue
            style, count = (over, True), 3
        else:
            n += 1
            continue
        if style not in styles:
            styles.append(style)
        found[n] = (min(styles.index(style) + 1, 4), n + 1 if style[1] else n, count)
        n += count
    return found


def _rule(line: str) -> str:
    """The character of `line` when it is a heading's underline: three or more of one of
    `UNDERLINES`, indented less than four columns; else ""."""
    stripped = line.strip()
    indent = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())
    if len(stripped) < 3 or indent >= 4 or stripped[0] not in UNDERLINES:
        return ""
    return stripped[0] if not stripped.strip(stripped[0]) else ""


def _heading_text(line: str) -> bool:
    """Whether `line` can be a heading's text: not blank, not a rule, not code, not too long."""
    indent = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())
    stripped = line.strip()
    return bool(stripped) and indent < 4 and not _rule(line) and len(stripped) <= MAX_HEADING_CHARS
