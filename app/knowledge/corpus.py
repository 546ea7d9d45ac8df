"""Cut a Markdown corpus into passages an answer engine can rank (`corpus_files` reads the folder).

Files are `*.md` and `*.mdx`, read by a CommonMark parser (markdown-it, with the extensions of
`markdown_parser`; `markdown_render` says what of a document is kept). YAML front matter is
stripped (its `title` names the document). What is not prose goes: HTML tags and comments (their
text stays), link targets, emphasis marks, MkDocs admonition markers (their content stays, and
a quoted title as a line), pymdownx tab markers, Docusaurus `:::` admonition markers and
mkdocstrings `:::` directives. MDX is not CommonMark: its `import`/`export` statements,
`{...}` expressions and JSX tags are taken out before parsing, by the small rules of
`markdown_mdx`, and the prose inside components is kept.

A passage is one section under a heading (ATX or setext, levels 1 to 4), or a chunk of it when
the section is long, so that a hit points the reader at a small, citable piece of a file. Its
text is plain Markdown: paragraphs, lists, pipe tables and fenced code blocks (indented code is
fenced too). Chunks are cut at block boundaries, and a code block is never cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import yaml

from app.knowledge.readers.markdown_parser import front_matter_parser
from app.knowledge.readers.markdown_render import Block, Heading, document_blocks, first_title
from app.knowledge.readers.markup import Heard, Warn

if TYPE_CHECKING:
    from app.knowledge.sites import Anchors

#: Upper bound on a passage's text; sections longer than this are cut at paragraph boundaries.
MAX_PASSAGE_CHARS = 1200

#: File name endings of the corpus.
SUFFIXES = (".md", ".mdx")

_HEADING_LINE = re.compile(r"#{1,6} ")  # a heading written as text (deeper than a passage's)
# Headings down to this level start a passage; deeper ones are text of their section.
_PASSAGE_LEVELS = 4

_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# A list item's marker, after its indentation: `- `, `* `, `+ `, `1. `, `1) `.
_LIST_MARKER = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])[ \t]")
# The id a reader puts at the end of a heading line: ` {#id}`, its punctuation escaped.
_HEADING_ID = re.compile(r"^(#{1,4} .*?) \{#(?:[^\s{}\\]|\\.)+\}$")
_FRONT_MATTER_OPENING = re.compile(r"-{3,}[ \t]*(?:\r\n|\r|\n)")
# Line breaks as markdown-it counts lines.
_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class CorpusPassage:
    """A section (or chunk of one) of a corpus file: its relative path, heading chain and text."""

    source: str
    heading: str
    text: str
    #: The `id` of its section on its page (`sites`); "" for the top of the page.
    anchor: str = ""


@dataclass(frozen=True, slots=True)
class CorpusFile:
    """One corpus file: its relative path, title and text (front matter stripped, else as written),
    where its front matter says it is published (`url`, or `slug` under the folder's site), and
    the `id` it gives the document (Docusaurus names its page so)."""

    source: str
    title: str
    text: str
    published: str | None = None
    page_id: str | None = None


def parse_file(markdown: str, source: str, *, heard: Heard | None = None) -> CorpusFile:
    """The file `source` holding `markdown`: front matter stripped, titled; `heard` hears the
    share of it read, as a large one is.

    The title is the front matter's `title`, else the first `#` heading (or HTML `<h1>`), else
    the first heading of any level, else the file name.
    """
    front, body = split_front_matter(markdown)
    title = front.get("title")
    if not isinstance(title, str) or not title.strip():
        title = first_title(body, mdx=_is_mdx(source), heard=heard) or source.rsplit("/", 1)[-1]
    published = next(
        (
            value.strip()
            for key in ("url", "slug")
            if isinstance(value := front.get(key), str) and value.strip()
        ),
        None,
    )
    page_id = front.get("id")
    return CorpusFile(
        source=source,
        title=" ".join(title.split()),
        text=body,
        published=published,
        page_id=page_id.strip() or None if isinstance(page_id, str) else None,
    )


def split_front_matter(markdown: str) -> tuple[dict[str, object], str]:
    """The YAML front matter of `markdown` (a `---` block at the very top) and the text after it.

    A top block that is not a YAML mapping is not front matter: the text is returned unchanged.
    """
    text = markdown.removeprefix("\ufeff")
    if not _FRONT_MATTER_OPENING.match(text):
        return {}, markdown
    block = front_matter_parser().parse(text)[0]
    if block.type != "front_matter" or block.map is None:
        return {}, markdown
    try:
        front = yaml.safe_load(block.content)
    except yaml.YAMLError:
        return {}, markdown
    if not isinstance(front, dict):
        return {}, markdown
    return {str(key): value for key, value in front.items()}, _after_lines(text, block.map[1])


def file_passages(
    file: CorpusFile,
    max_chars: int = MAX_PASSAGE_CHARS,
    *,
    heard: Heard | None = None,
    warn: Warn | None = None,
    anchors: Anchors | None = None,
) -> list[CorpusPassage]:
    """Cut one corpus file into passages at its headings, chunking long sections.

    Each passage's heading is the chain of enclosing headings joined with " > ", rooted at the
    document's title when the document has no `#` heading of its own and its title is not its
    first heading's. Text before the first
    heading is filed under the document's title. Headings are the parser's: a line in code is
    never one, and one inside a list item is text. Sections with no text are dropped. `heard`
    hears the share of the file cut as it goes; `warn` once that a part nested too deep for the
    parser was read as text.

    Each passage's anchor is the `id` its page gives its heading (`anchors` makes them from every
    heading's text and explicit id; by default the explicit ids alone), else its nearest enclosing
    heading's; "" for the top of the page (the text before the first heading, and the section of
    the heading that titles the document).
    """
    blocks = document_blocks(file.text, mdx=_is_mdx(file.source), heard=heard, warn=warn)
    headings = [block for block in blocks if isinstance(block, Heading)]
    found = iter(
        anchors([(h.title, h.anchor) for h in headings]) if anchors else [h.anchor for h in headings]
    )
    root: list[tuple[int, str, str | None]] = []
    first = headings[0].title if headings else None
    if _first_title(blocks) is None and file.title not in (file.source.rsplit("/", 1)[-1], first):
        root = [(0, file.title, None)]
    sections: list[tuple[tuple[str, ...], str, list[str]]] = [((), "", [])]
    chain = list(root)
    for block in blocks:
        anchor = next(found) if isinstance(block, Heading) else None
        if not isinstance(block, Heading) or block.level > _PASSAGE_LEVELS:
            sections[-1][2].append(_markdown(block))
            continue
        chain = [entry for entry in chain if entry[0] < block.level]
        chain.append((block.level, block.title, anchor))
        sections.append((tuple(title for _, title, _ in chain), _anchor_of(chain, file.title), []))

    passages: list[CorpusPassage] = []
    for titles, anchor, texts in sections:
        heading = " > ".join(titles) if titles else file.title
        passages.extend(
            CorpusPassage(source=file.source, heading=heading, text=chunk, anchor=anchor)
            for chunk in chunk_text("\n\n".join(texts), max_chars)
        )
    return passages


def _anchor_of(chain: list[tuple[int, str, str | None]], title: str) -> str:
    """The anchor of a section under the headings of `chain` (level, text, id): its own id, else
    the nearest enclosing one's; "" for the section of the heading that titles the page."""
    if len(chain) == 1 and (chain[0][0] == 0 or chain[0][1] == title):
        return ""
    return next((anchor for _, _, anchor in reversed(chain) if anchor), "")


def shown_text(file: CorpusFile) -> str:
    """The text of `file` as a reader is shown it: the `{#id}` a reader of another format (rst,
    HTML) put on its headings for `file_passages` taken off (a Markdown file stays as written)."""
    if file.source.endswith(SUFFIXES) or "{#" not in file.text:
        return file.text
    lines = file.text.split("\n")
    return "\n".join(
        line if in_code else _HEADING_ID.sub(r"\1", line)
        for line, in_code in zip(lines, _fence_flags(lines), strict=True)
    )


def clean_markup(markdown: str, *, mdx: bool = False) -> str:
    """`markdown` as plain Markdown without the markup that is not prose (see the module's
    docstring); headings are written as `#` headings, code blocks as fences, content as written.

    `mdx` reads `markdown` as MDX: its ESM lines, `{...}` expressions and JSX tags go too.
    """
    return "\n\n".join(_markdown(block) for block in document_blocks(markdown, mdx=mdx))


def chunk_text(text: str, max_chars: int = MAX_PASSAGE_CHARS) -> list[str]:
    """Pack the blocks of `text` into chunks of at most `max_chars` characters.

    Blocks are paragraphs (separated by blank lines) and fenced code blocks (blank lines and
    all). Blocks stay whole when they fit; a long table is cut between rows (each piece keeps the
    header), a prose paragraph longer than `max_chars` at sentence or line ends, and failing that
    at spaces. A code block is never cut: one longer than
    `max_chars` makes a chunk of its own. Empty text gives [].
    """
    pieces: list[str] = []
    for block, is_code in split_blocks(text):
        if is_code:
            pieces.append(block)
        elif _is_table(block) and len(block) > max_chars:
            pieces.extend(_table_pieces(block, max_chars))
        else:
            pieces.extend(_fit(block, max_chars))
    return _pack(_lead_on(pieces, max_chars), "\n\n", max_chars)


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
    for line, in_code in zip(lines, _fence_flags(lines), strict=True):
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


def _fence_flags(lines: list[str]) -> list[bool]:
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


def _is_mdx(source: str) -> bool:
    return source.endswith(".mdx")


def _markdown(block: Block) -> str:
    return block.markdown if isinstance(block, Heading) else block


def _first_title(blocks: list[Block]) -> str | None:
    """The first level-1 heading of a document's blocks, if it has one."""
    return next((b.title for b in blocks if isinstance(b, Heading) and b.level == 1), None)


def _after_lines(text: str, count: int) -> str:
    """`text` after its first `count` lines."""
    position = 0
    for _ in range(count):
        match = _NEWLINE.search(text, position)
        if match is None:
            return ""
        position = match.end()
    return text[position:]
