"""What every reader writes with: Markdown-shaped text built block by block (`Markdown`), the
escaping that keeps text text, the error a reader raises for a document it cannot read, and what
a reader tells its caller as it goes (`Heard`, `Warn`).

The rst, HTML and plain-text readers write Markdown so that the one passage cutter
(`corpus.file_passages`, which reads its text as CommonMark) cuts every format alike. Lists are
written nested at most `MAX_LIST_DEPTH` deep: each level indents every line below it, so a
document of lists in lists without end would be written quadratically long, and the Markdown
parser reads about nine levels anyway. The items of deeper lists are lines of text in the
deepest item.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

#: Hears the share of a document read so far (0 to 1), as a reader goes through a large one.
Heard = Callable[[float], None]
#: Hears, once for each cause, what a reader did not read as the document says (a nesting cap).
Warn = Callable[[str], None]

#: How many bytes of a document go by between two reports of its progress.
HEARD_EVERY = 1 << 18


def heard_as_bytes(report: Callable[[int], None], before: int, size: int) -> Heard:
    """What hears the share of one document of `size` bytes read, and reports it to `report` as
    bytes of a whole (`before` bytes came before it), every `HEARD_EVERY` bytes or so."""
    told = before

    def heard(share: float) -> None:
        nonlocal told
        at = before + int(size * min(1.0, share))
        if at - told >= HEARD_EVERY:
            told = at
            report(at)

    return heard


#: Lists nested deeper than this are written as lines of text in the deepest item.
MAX_LIST_DEPTH = 8
#: What a reader is told of a document whose lists nest deeper than that.
DEEP_LISTS_WARNING = (
    f"its lists nest more than {MAX_LIST_DEPTH} deep; the items of deeper lists are read as lines of "
    f"text in the item at depth {MAX_LIST_DEPTH}"
)

# What Markdown reads as a block's start rather than as text, at the start of a line (indented
# less than four columns, else it is code or a list's content): a heading, a setext underline or a
# rule, a fence, an admonition, container, tab or directive marker, a link reference definition.
_BLOCK_START = re.compile(r"#{1,6}(?:[ \t]|$)|=+[ \t]*$|-+[ \t]*$|```|~~~|:::|!!!|\?\?\?|===|\[[^\]]*\]:")
# ... and in written text also a list item or a quote; the delimiter of `1.` is what is escaped.
_LIST_START = re.compile(r"[-+*](?:[ \t]|$)|>")
_ORDERED = re.compile(r"\d{1,9}(?=[.)](?:[ \t]|$))")
# Inline markup a text character would start: code, emphasis, links and images, HTML, entities,
# strikethrough, escapes. `_` inside a word (snake_case) is not emphasis and is left alone.
_INLINE = re.compile(r"[\\`*\[]|(?<![^\W_])_|_(?![^\W_])|<(?=[A-Za-z/!?>])|&(?=#?\w+;)|~(?=~)|(?<=~)~")
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
_TICKS = re.compile(r"`+")
_TRAILING_HASHES = re.compile(r"(?<=\s)(#+)(?=\s*$)")
# An id a heading can carry as `{#id}` (no space or brace in it), its punctuation escaped.
_ID = re.compile(r"[^\s{}]+")
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


class UnreadableDocument(ValueError):
    """A document its parser rejects; the message says why, as a warning about the file does."""


def escape(text: str) -> str:
    """`text` written as Markdown that reads back as `text`: a backslash before each character
    that would start inline markup. (`plain_line` guards the start of a line.)"""
    return _INLINE.sub(r"\\\g<0>", text)


def unescape(markdown: str) -> str:
    """Inline Markdown as a title cites it: escapes undone, code spans kept as written."""
    out: list[str] = []
    at = 0
    for start, end in code_spans(markdown):
        out.extend([_ESCAPED.sub(r"\1", markdown[at:start]), markdown[start:end]])
        at = end
    out.append(_ESCAPED.sub(r"\1", markdown[at:]))
    return "".join(out)


def code_spans(markdown: str) -> list[tuple[int, int]]:
    """Where the code spans of inline Markdown are, left to right: a run of backticks (not
    escaped) up to the next run of exactly as many. Each run's closer is looked up, not searched
    for again from every opener, so a text of runs that never close is read in one pass."""
    runs = [(found.start(), found.end() - found.start()) for found in _TICKS.finditer(markdown)]
    starts: dict[int, list[int]] = {}
    for start, length in runs:
        starts.setdefault(length, []).append(start)
    spans: list[tuple[int, int]] = []
    at = 0
    for start, length in runs:
        if start < at:
            continue
        opener, size = start, length
        if _escaped(markdown, start):  # `\`` is a backtick; the run's rest may open a span
            opener, size = start + 1, length - 1
            if not size:
                continue
        same = starts.get(size, [])
        closer = bisect.bisect_right(same, opener + size - 1)
        if closer < len(same):
            spans.append((opener, same[closer] + size))
            at = same[closer] + size
    return spans


def _escaped(text: str, position: int) -> bool:
    """Whether the character at `position` follows an odd run of backslashes."""
    run = 0
    while position - run > 0 and text[position - run - 1] == "\\":
        run += 1
    return run % 2 == 1


def plain_line(line: str, *, lists: bool = True) -> str:
    """`line` with a backslash where Markdown would read its start as the start of a block rather
    than as text; with `lists`, of a list item or a quote too."""
    text = line.lstrip(" \t")
    if not text or len(line[: len(line) - len(text)].expandtabs(4)) >= 4:
        return line
    pad = line[: len(line) - len(text)]
    if _BLOCK_START.match(text) or (lists and _LIST_START.match(text)):
        return f"{pad}\\{text}"
    if lists and (ordered := _ORDERED.match(text)):
        return f"{pad}{text[: ordered.end()]}\\{text[ordered.end() :]}"
    return line


def shorten(text: str, limit: int) -> str:
    """`text` with its spaces collapsed, cut at a word end to at most `limit` characters (an
    ellipsis marks the cut)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    # A first word longer than the limit has no space to cut at.
    return (text[:cut] if cut > 0 else text[: limit - 1]).rstrip() + "…"


def file_name(source: str) -> str:
    return source.rsplit("/", 1)[-1]


def code_span(code: str) -> str:
    """`code` as a Markdown code span (its spaces collapsed): the passage cutter keeps what is in
    one as written, `<tags>` and all."""
    code = " ".join(code.split())
    if not code:
        return ""
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", code)), default=0) + 1)
    pad = " " if code.startswith("`") or code.endswith("`") else ""
    return f"{ticks}{pad}{code}{pad}{ticks}"


@dataclass
class _Item:
    base: int  # where the item's marker starts
    marker: str
    fresh: bool = True  # no line yet: the next text goes on the marker's line

    @property
    def indent(self) -> int:
        """Where the item's text starts, so that its own lines and nested items line up."""
        return self.base + len(self.marker)


class Markdown:
    """Markdown-shaped text built block by block: what the rst and HTML readers write into.

    Blocks are separated by blank lines, and the items of a list are one block, one line each.
    """

    def __init__(self) -> None:
        #: The blocks finished so far, each (kind, text): kind is heading, text, code, list or table.
        self.blocks: list[tuple[str, str]] = []
        #: Whether a list nested deeper than `MAX_LIST_DEPTH` was written as text.
        self.too_deep = False
        self._items: list[_Item] = []  # the list items open, outermost first
        self._list: list[str] = []  # the lines of the list being written

    def heading(self, depth: int, text: str, anchor: str | None = None) -> None:
        """A heading at `depth` (1 is the top; deeper than 4 is written as 4) of inline Markdown,
        with its page's `anchor` (an id) as a `{#id}` attribute, which the passage cutter takes off."""
        text = _TRAILING_HASHES.sub(r"\\\1", " ".join(text.split()))
        if text:
            self._end_list()
            if anchor and _ID.fullmatch(anchor):
                escaped = _PUNCTUATION.sub(r"\\\g<0>", anchor)
                text = f"{text} {{#{escaped}}}"
            self.blocks.append(("heading", f"{'#' * max(1, min(depth, 4))} {text}"))

    def text(self, text: str) -> None:
        """A paragraph of inline Markdown (see `escape`), or the text of the list item open; its
        line breaks are kept."""
        lines = [" ".join(line.split()) for line in text.split("\n")]
        lines = [line for line in lines if line]
        if not lines:
            return
        if not self._items:
            self._end_list()
            self.blocks.append(("text", "\n".join(map(plain_line, lines))))
            return
        item = self._items[-1]
        if item.fresh:
            self._list.append(" " * item.base + item.marker + plain_line(lines.pop(0)))
            item.fresh = False
        self._list.extend(" " * item.indent + plain_line(line) for line in lines)

    def fence(self, code: str, info: str = "") -> None:
        """A code block, exactly as written (trailing spaces and blank edges aside)."""
        code = "\n".join(line.rstrip() for line in code.split("\n")).strip("\n")
        if not code.strip():
            return
        self._end_list()
        longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
        fence = "`" * max(3, longest + 1)
        self.blocks.append(("code", f"{fence}{info}\n{code}\n{fence}"))

    def open_item(self, marker: str) -> None:
        """Start a list item marked `marker` (`- `, `3. `), nested in the item open, if any; past
        `MAX_LIST_DEPTH`, its text is lines of the item open instead."""
        base = 0
        if self._items:
            parent = self._items[-1]
            if parent.fresh:
                # A list right at the start of an item: the item's marker gets a line of its own.
                self._list.append(" " * parent.base + parent.marker.rstrip())
                parent.fresh = False
            if len(self._items) >= MAX_LIST_DEPTH:
                self.too_deep = True
                self._items.append(_Item(parent.base, parent.marker, fresh=False))
                return
            base = parent.indent
        self._items.append(_Item(base, marker))

    def close_item(self) -> None:
        """End the list item open; an item that got no text leaves no line."""
        self._items.pop()

    def end_list(self) -> None:
        """End the list being written, unless an item is still open (a list nested in it ends)."""
        if not self._items:
            self._end_list()

    def table(self, rows: list[list[str]], header: bool) -> None:
        """A table of inline Markdown cells, one line a row: a Markdown table when its first row
        is a header."""
        # Every `|` of a cell is escaped, in code spans too: a table's rows are split before its
        # cells are read.
        cells = [[" ".join(cell.split()).replace("|", "\\|") for cell in row] for row in rows]
        cells = [row for row in cells if any(row)]
        if not cells:
            return
        self._end_list()
        width = max(len(row) for row in cells)
        lines = ["| " + " | ".join(row + [""] * (width - len(row))) + " |" for row in cells]
        if header:
            lines.insert(1, "|" + " --- |" * width)
        self.blocks.append(("table", "\n".join(lines)))

    def extend(self, blocks: list[tuple[str, str]]) -> None:
        """Add finished `blocks` (of another `Markdown`) after these."""
        self._end_list()
        self.blocks.extend(blocks)

    def finished(self) -> list[tuple[str, str]]:
        """The blocks written, any list still open included."""
        while self._items:
            self.close_item()
        self._end_list()
        return self.blocks

    def render(self) -> str:
        """The text: blocks separated by blank lines, ending with a line end (empty when nothing)."""
        blocks = self.finished()
        return "\n\n".join(text for _, text in blocks) + "\n" if blocks else ""

    def _end_list(self) -> None:
        if self._list:
            self.blocks.append(("list", "\n".join(self._list)))
            self._list = []
