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
fenced too). Chunks are cut at block boundaries (`chunks`), and a code block is never cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import yaml

from app.knowledge.chunks import MAX_PASSAGE_CHARS, chunk_text, fence_flags
from app.knowledge.readers.markdown_parser import front_matter_parser
from app.knowledge.readers.markdown_render import Block, Heading, document_blocks, first_title
from app.knowledge.readers.markup import Heard, Warn

if TYPE_CHECKING:
    from app.knowledge.sites import Anchors

#: File name endings of the corpus.
SUFFIXES = (".md", ".mdx")

# Headings down to this level start a passage; deeper ones are text of their section.
_PASSAGE_LEVELS = 4

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
        for line, in_code in zip(lines, fence_flags(lines), strict=True)
    )


def clean_markup(markdown: str, *, mdx: bool = False) -> str:
    """`markdown` as plain Markdown without the markup that is not prose (see the module's
    docstring); headings are written as `#` headings, code blocks as fences, content as written.

    `mdx` reads `markdown` as MDX: its ESM lines, `{...}` expressions and JSX tags go too.
    """
    return "\n\n".join(_markdown(block) for block in document_blocks(markdown, mdx=mdx))


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
