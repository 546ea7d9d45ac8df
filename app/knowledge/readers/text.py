"""Plain text documents (`.txt`): their text as written, kept from reading as Markdown."""

from __future__ import annotations

import re

from app.knowledge.corpus import CorpusFile
from app.knowledge.readers.markup import file_name, plain_line, shorten

#: A title taken from a line of plain text is cut to this many characters.
MAX_TITLE_CHARS = 80

_TAG_START = re.compile(r"<(?=[A-Za-z/!?>])")


def read_text(text: str, source: str) -> CorpusFile:
    """A plain text file: its text as written, titled by its first non-empty line.

    It has no headings and no Markdown: a line that Markdown would read as the start of a block
    (a heading, a setext underline, a code fence, an admonition marker, a link definition) gets a
    backslash before its first character, and so does a `<` that would start an HTML tag, so that
    the text stays text.
    """
    text = text.removeprefix("\ufeff")
    first = next((line for line in text.splitlines() if line.strip()), "")
    title = shorten(first, MAX_TITLE_CHARS) or file_name(source)
    lines: list[str] = []
    code = False  # in an indented code block, whose text Markdown takes as it is
    for line in text.split("\n"):
        indented = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip()) >= 4 and bool(line.strip())
        code = (indented and (code or not lines or not lines[-1].strip())) or (code and not line.strip())
        lines.append(line if code else plain_line(_TAG_START.sub(r"\\<", line), lists=False))
    return CorpusFile(source=source, title=title, text="\n".join(lines))
