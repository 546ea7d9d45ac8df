"""Cutting a section's Markdown into chunks of at most a passage's size (`chunk_text`), and
reading a passage's Markdown back as its blocks (`split_blocks`).

A chunk is cut between blocks (paragraphs, fenced code, lists, tables). A block too long is cut
where it reads naturally: a table between rows (each piece keeps its header), a list between its
items and, for an item too long, between the items of its own list; prose between sentences;
failing that at spaces. A code block is never cut. What leads into the next block (a heading
written as text, a sentence ending in a colon) stays with it when both fit.
"""

from __future__ import annotations

import re

#: Upper bound on a passage's text; sections longer than this are cut at block boundaries.
MAX_PASSAGE_CHARS = 1200

_HEADING_LINE = re.compile(r"#{1,6} ")  # a heading written as text (deeper than a passage's)
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# A list item's marker, after its indentation: `- `, `* `, `+ `, `1. `, `1) `.
_LIST_MARKER = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])[ \t]")


def chunk_text(text: str, max_chars: int = MAX_PASSAGE_CHARS) -> list[str]:
    """Pack the blocks of `text` into chunks of at most `max_chars` characters.

    Blocks are paragraphs (separated by blank lines) and fenced code blocks (blank lines and
    all). Blocks stay whole when they fit; a long table is cut between rows (each piece keeps the
    header), a long list between its items (a chunk that starts inside an item's own list is
    moved left by the indentation it starts with, so that it still reads as a list), a prose
    paragraph longer than `max_chars` at sentence ends, and failing that at spaces. A code block
    is never cut: one longer than `max_chars` makes a chunk of its own. Empty text gives [].
    """
    pieces: list[str] = []
    for block, is_code in split_blocks(text):
        if is_code:
            pieces.append(block)
        elif _is_table(block) and len(block) > max_chars:
            pieces.extend(_table_pieces(block, max_chars))
        else:
            pieces.extend(_fit(block, max_chars))
    return [_dedented(chunk) for chunk in _pack(_lead_on(pieces, max_chars), "\n\n", max_chars)]


def _dedented(chunk: str) -> str:
    """`chunk` moved left by the indentation of its first line when that is a list item's (one
    cut out of its parent's list), each line by as much of it as the line has."""
    marker = _LIST_MARKER.match(chunk)
    indent = len(marker.group(1)) if marker else 0
    if not indent:
        return chunk
    return "\n".join(line[min(indent, len(line) - len(line.lstrip(" \t"))) :] for line in chunk.split("\n"))


def _lead_on(pieces: list[str], max_chars: int) -> list[str]:
    """`pieces`, each that leads into the next (a heading written as text, `##### x`, or a sentence
    ending in a colon) joined to it when both fit: no chunk ends on one."""
    joined: list[str] = []
    last = ""  # the piece `joined` ends with
    for piece in pieces:
        leads = bool(_HEADING_LINE.match(last)) or last.rstrip().endswith(":")
        if leads and len(joined[-1]) + 2 + len(piece) <= max_chars:
            joined[-1] = f"{joined[-1]}\n\n{piece}"
        else:
            joined.append(piece)
        last = piece
    return joined


def _is_table(block: str) -> bool:
    lines = block.splitlines()
    return len(lines) > 2 and all(line.lstrip().startswith("|") for line in lines) and "-" in lines[1]


def _table_pieces(block: str, max_chars: int) -> list[str]:
    """A long table cut between rows, each piece headed by the table's header and rule lines."""
    lines = block.splitlines()
    head = lines[:2]
    pieces: list[str] = []
    rows: list[str] = []
    for row in lines[2:]:
        if rows and len("\n".join([*head, *rows, row])) > max_chars:
            pieces.append("\n".join([*head, *rows]))
            rows = []
        rows.append(row)
    if rows:
        pieces.append("\n".join([*head, *rows]))
    return pieces


def split_blocks(text: str) -> list[tuple[str, bool]]:
    """The paragraphs and fenced code blocks of `text`, each flagged whether it is code.

    `text` is a passage's (`clean_markup` writes all code as fences, and escapes a prose line
    that would open one), so it is read line by line, which is fast enough for every answer.
    """
    blocks: list[tuple[str, bool]] = []
    current: list[str] = []
    current_is_code = False

    def close() -> None:
        block = "\n".join(current).strip("\n").rstrip()
        if block.strip():
            blocks.append((block, current_is_code))
        current.clear()

    lines = text.splitlines()
    for line, in_code in zip(lines, fence_flags(lines), strict=True):
        if in_code != current_is_code or (not in_code and not line.strip()):
            close()
            current_is_code = in_code
        if in_code or line.strip():
            current.append(line)
    close()
    return blocks


def _fit(paragraph: str, max_chars: int) -> list[str]:
    """Split one paragraph into pieces no longer than `max_chars`, preferring natural breaks: a
    list between its items (each a line or more, as written), prose between sentences (its lines
    joined: a line's end is no sentence's); a piece still too long at spaces."""
    if len(paragraph) <= max_chars:
        return [paragraph]
    items = _list_items(paragraph)
    if len(items) == 1:  # one item: between the items of its own list, if it has one
        items = _nested_items(items[0])
    if len(items) > 1:
        pieces = [
            piece for item in items for piece in (_fit(item, max_chars) if len(item) > max_chars else [item])
        ]
        return _pack(pieces, "\n", max_chars)
    prose = " ".join(line.strip() for line in paragraph.splitlines() if line.strip())
    pieces = []
    for sentence in _SENTENCE_END.split(prose):
        # Cut where `at` stands, not by slicing off the rest each time: that copied a long
        # sentence once a piece, quadratic in its length.
        at, end = 0, len(sentence)
        while end - at > max_chars:
            cut = sentence.rfind(" ", at, at + max_chars + 1)
            # A single word longer than the limit has no space to cut at; cut it hard.
            cut = cut if cut > at else at + max_chars
            pieces.append(sentence[at:cut].rstrip())
            at = cut
            while at < end and sentence[at].isspace():
                at += 1
        if at < end:
            pieces.append(sentence[at:])
    return _pack(pieces, " ", max_chars)


def _list_items(block: str) -> list[str]:
    """The items of a list `block` (its lines from each marker at the first one's indentation or
    less to the next), else [] when it does not start as a list."""
    lines = block.split("\n")
    first = _LIST_MARKER.match(lines[0])
    if first is None:
        return []
    items: list[str] = []
    for line in lines:
        marker = _LIST_MARKER.match(line)
        if (marker is not None and len(marker.group(1)) <= len(first.group(1))) or not items:
            items.append(line)
        else:
            items[-1] += "\n" + line
    return items


def _nested_items(item: str) -> list[str]:
    """A list item cut before each item of its own list (the lines up to the first of them, then
    each, indented as written); [item] when it holds no list."""
    lines = item.split("\n")
    first = next((n for n, line in enumerate(lines) if n and _LIST_MARKER.match(line)), None)
    if first is None:
        return [item]
    return ["\n".join(lines[:first]), *_list_items("\n".join(lines[first:]))]


def _pack(pieces: list[str], separator: str, max_chars: int) -> list[str]:
    """Greedily join consecutive pieces with `separator` while the result fits in `max_chars`."""
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        candidate = f"{current}{separator}{piece}" if current else piece
        if len(candidate) <= max_chars or not current:
            current = candidate
        else:
            chunks.append(current)
            current = piece
    if current:
        chunks.append(current)
    return chunks


def fence_flags(lines: list[str]) -> list[bool]:
    """For each line, whether it belongs to a fenced code block (fence lines included).

    A fence closes with a line of the same fence characters only, at least as many; an
    unclosed fence runs to the end.
    """
    flags: list[bool] = []
    fence: str | None = None
    for line in lines:
        stripped = line.strip()
        if fence is None:
            match = _FENCE.match(line)
            if match:
                run = len(stripped) - len(stripped.lstrip(match.group(1)[0]))
                fence = match.group(1)[0] * run
            flags.append(match is not None)
        else:
            flags.append(True)
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
    return flags
