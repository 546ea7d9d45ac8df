"""A Markdown document as the blocks its passages are made of: headings, and Markdown text
reduced to its prose.

The document is parsed by markdown-it (`markdown_parser`; an MDX one after `strip_mdx`) and its
syntax tree written back as blocks. A block is a `Heading` or a string of plain Markdown:

- a paragraph is its text: links keep their text, images their alt text, emphasis its words,
  HTML tags and comments go; a code span stays in backticks with its content as written, so
  that code still reads as code;
- a list is `-` or `1.` items, one a line when the list is tight, nested lists indented;
- a table is a pipe table of plain cells (`|` inside a cell escaped), header rule and all;
- a code block, fenced or indented, is a fence with its content exactly as written, the fence
  long enough that no line of the content can close it;
- quotes, admonitions, tabs and footnotes are unwrapped; an admonition keeps a quoted title, a
  tab its title, as a bold line of their own (`**Note on streams**`), unless nothing is left
  under it;
- an HTML block loses its comments, tags and `script`/`style` elements; the text left is read
  as Markdown again;
- a page's own table of contents (a list of links to its sections and nothing else) is left
  out, with the line that names it (`markdown_contents`).

Headings inside a list item or a table cell are text there; every other heading is a `Heading`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from markdown_it.tree import SyntaxTreeNode

from app.knowledge.readers.markdown_code import code_blocks
from app.knowledge.readers.markdown_contents import is_table_of_contents, names_contents
from app.knowledge.readers.markdown_parser import CONTAINER, HEARD, TAB, TOO_DEEP, outline_parser, parser
from app.knowledge.readers.markdown_references import only_definitions, resolve
from app.knowledge.readers.markup import Heard, Warn
from app.knowledge.readers.mdx import strip_mdx
from app.knowledge.readers.templates import strip_template_tags


@dataclass(frozen=True, slots=True)
class Heading:
    """A heading of the document: its level (1 to 6) and its text as cited."""

    level: int
    title: str
    #: Its explicit id (`{#id}` after its text), if it has one.
    anchor: str | None = None

    @property
    def markdown(self) -> str:
        """The heading written as an ATX heading."""
        return f"{'#' * self.level} {self.title}"


Block = Heading | str

# Heading attributes as MkDocs (`{: #id .class}`) and Docusaurus (`{#id}`) write them.
_ATTRIBUTES = re.compile(r"\{\s*[:#.][^{}]*\}")
_ID = re.compile(r"(?:(?<=[{\s:])|^)#([^\s{}]+)")
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_RAW_TEXT = re.compile(r"<(script|style)\b.*?(?:</\1\s*>|\Z)", re.S | re.I)
_TAG = re.compile(
    r"</?([A-Za-z][\w.:-]*)(?:\s[^<>]*?)?/?>|<>|</>|<\?.*?\?>|<![A-Za-z][^>]*>|<!\[CDATA\[.*?\]\]>", re.S
)
# The tags of `_TAG` that end before the next `<`; `_without_tags` finds the others' ends itself.
_SIMPLE_TAG = re.compile(r"</?([A-Za-z][\w.:-]*)(?:\s[^<>]*?)?/?>|<>|</>")
# Tags that break a line where they stand: dropping them must not run two cells' words together.
_BREAKING = re.compile(
    r"address|article|aside|blockquote|br|caption|dd|details|div|dl|dt|figcaption|figure|footer|h[1-6]|"
    r"header|hr|li|main|nav|ol|p|pre|section|summary|table|tbody|td|tfoot|th|thead|tr|ul",
    re.I,
)
_FENCE_LIKE = re.compile(r"^\s*(?:```|~~~)")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
_TRANSPARENT = frozenset({"blockquote", "footnote_block", "footnote", CONTAINER})
# An HTML block's text is parsed again; text that still holds HTML after that is taken as it is.
_MAX_DEPTH = 2


#: What a reader is told of a document whose containers nest deeper than the parser reads.
TOO_DEEP_WARNING = (
    "its lists, quotes or admonitions nest deeper than the Markdown parser reads (8 lists in lists, "
    "17 quotes in quotes); what lies deeper is read as plain text"
)
#: How the parse's phases share the progress of a document: its blocks, its inline text, and
#: writing its top-level blocks out.
_SHARES = {"blocks": (0.0, 0.15), "inlines": (0.15, 0.55), "writing": (0.7, 0.3)}


def document_blocks(
    markdown: str, *, mdx: bool = False, heard: Heard | None = None, warn: Warn | None = None
) -> list[Block]:
    """The blocks of `markdown`, in reading order; `heard` hears the share of it done as it goes,
    `warn` once that a part of it nested too deep was read as text."""
    env: dict[str, Any] = {}
    if heard is not None:
        env[HEARD] = lambda phase, done, of: heard(_SHARES[phase][0] + _SHARES[phase][1] * done / max(1, of))
    blocks = _Writer(mdx, env).blocks(_prepare(markdown, mdx=mdx), depth=0)
    if env.get(TOO_DEEP) and warn is not None:
        warn(TOO_DEEP_WARNING)
    return blocks


def first_title(markdown: str, *, mdx: bool = False, heard: Heard | None = None) -> str | None:
    """The text of the first level-1 heading of `markdown` outside lists, else of its first
    heading of any level, else of an HTML `<h1>` in an HTML block (a README's), if it has one:
    a site's banner (`<h1 align="center">Fastify</h1>` atop every page) names no page. `heard`
    hears the share of the document read as it goes. A heading of markup only (a logo) is none."""
    env: dict[str, Any] = {} if heard is None else {HEARD: lambda _, done, of: heard(done / max(1, of))}
    tokens = outline_parser(mdx=mdx).parse(_prepare(markdown, mdx=mdx), env)
    in_list = 0
    first: str | None = None
    html: str | None = None
    for n, token in enumerate(tokens):
        if token.type == "list_item_open":
            in_list += 1
        elif token.type == "list_item_close":
            in_list -= 1
        elif token.type == "heading_open" and not in_list:
            inline = SyntaxTreeNode(parser(mdx=mdx).parseInline(tokens[n + 1].content)).children[0]
            title = _heading_title(inline)
            if title and token.tag == "h1":
                return title
            first = first or title or None
        elif token.type == "html_block" and not in_list and html is None:
            html = _html_h1(token.content) or None
    return first or html


def _html_h1(html: str) -> str:
    """The text of the first `<h1>` of an HTML block, its tags gone; "" when it has none."""
    lower = html.lower()
    start = lower.find("<h1")
    while start >= 0 and lower[start + 3 : start + 4] not in (">", " ", "\t", "\n", "/"):
        start = lower.find("<h1", start + 3)
    opened = lower.find(">", start) if start >= 0 else -1
    end = lower.find("</h1", opened) if opened >= 0 else -1
    if end < 0:
        return ""
    return " ".join(_without_tags(_COMMENT.sub("", html[opened + 1 : end])).split())


def _prepare(markdown: str, *, mdx: bool) -> str:
    text = strip_template_tags(markdown.removeprefix("\ufeff"))
    return strip_mdx(text) if mdx else text


class _Writer:
    """Writes a syntax tree back as blocks; `mdx` says which parser reads HTML's text again, `env`
    is every parse's (what it noted, and what hears its progress)."""

    def __init__(self, mdx: bool, env: dict[str, Any]) -> None:
        self.mdx = mdx
        self.env = env

    def blocks(self, markdown: str, *, depth: int, flat: bool = False) -> list[Block]:
        """The blocks of `markdown`, parsed `depth` times over (HTML's text is parsed again)."""
        tokens = parser(mdx=self.mdx).parse(markdown, self.env)
        return self.nodes(SyntaxTreeNode(tokens).children, depth, flat)

    def nodes(self, nodes: list[SyntaxTreeNode], depth: int, flat: bool) -> list[Block]:
        """The blocks of `nodes`; `flat` (inside a list item) writes headings as text lines."""
        out: list[Block] = []
        heard = self.env.get(HEARD) if depth == 0 and not flat else None
        for number, node in enumerate(nodes):
            kind = node.type
            # By number: `previous_sibling` looks itself up among its siblings, which made a
            # document's writing quadratic in its number of blocks.
            after_html = number > 0 and nodes[number - 1].type == "html_block"
            if heard is not None and number % 256 == 0:
                heard("writing", number, len(nodes))
            if kind == "code_block" and after_html:
                # A blank line inside an HTML element ends CommonMark's HTML block; the element's
                # indented text after it is the HTML's, not an indented code block.
                out.extend(self.html(node.content, depth, flat))
            elif kind == "heading":
                # A heading of markup only (`# <img src=logo.png>`) has nothing to cite: no heading.
                heading = Heading(int(node.tag[1]), *_heading_parts(node.children[0]))
                out.append(heading.title if flat or not heading.title else heading)
            elif kind == "paragraph" and only_definitions(node.children[0].content):
                continue  # link definitions CommonMark did not take (`markdown_references`)
            elif kind == "paragraph":
                bold = _wholly_bold(node.children[0])
                out.append(_paragraph(node.children[0]) if bold is None else _label(_paragraph(bold)))
            elif kind in ("fence", "code_block"):
                out.extend(code_blocks(node.content, node.info, node.markup))
            elif kind in ("bullet_list", "ordered_list") and not flat and is_table_of_contents(node):
                if out and isinstance(out[-1], str) and names_contents(out[-1]):
                    out.pop()  # the line that names it
            elif kind in ("bullet_list", "ordered_list"):
                out.append(self.items(node, depth))
            elif kind == "table":
                out.append(_table(node))
            elif kind == "html_block":
                out.extend(self.html(node.content, depth, flat))
            elif kind == "front_matter":
                out.extend(self.front_matter(node.content, depth, flat))
            elif kind == "admonition":
                body = self.nodes([c for c in node.children if c.type != "admonition_title"], depth, flat)
                titles = [c for c in node.children if c.type == "admonition_title"]
                if body and titles and '"' in node.info:
                    out.append(_label(_paragraph(titles[0].children[0])))
                out.extend(body)
            elif kind == TAB:
                body = self.nodes(node.children, depth, flat)
                if body:
                    out.append(_label(" ".join(str(node.meta.get("title", "")).split())))
                out.extend(body)
            elif kind in _TRANSPARENT:
                out.extend(self.nodes(node.children, depth, flat))
        return [block for block in out if isinstance(block, Heading) or block.strip()]

    def items(self, node: SyntaxTreeNode, depth: int) -> str:
        """A list as `-` or numbered items, content indented under its item's marker."""
        items = node.children
        tight = all(p.hidden for item in items for p in item.children if p.type == "paragraph")
        gap = "\n" if tight else "\n\n"
        start = int(str(node.attrGet("start") or 1)) if node.type == "ordered_list" else 0
        written: list[str] = []
        for n, item in enumerate(items):
            marker = f"{start + n}{node.markup} " if node.type == "ordered_list" else "- "
            blocks = self.nodes(item.children, depth, flat=True)
            body = gap.join(block.markdown if isinstance(block, Heading) else block for block in blocks)
            if not body:
                continue
            lines = body.split("\n")
            # A fence right after a marker would not read as a fence: it goes on the next line.
            head = marker.rstrip() if _FENCE_LIKE.match(lines[0]) else f"{marker}{lines.pop(0)}".rstrip()
            pad = " " * len(marker)
            written.append("\n".join([head, *(pad + line if line else "" for line in lines)]))
        return gap.join(written)

    def html(self, content: str, depth: int, flat: bool) -> list[Block]:
        """An HTML block's text, its tags, comments, scripts and styles gone, read as Markdown."""
        text = _without_tags(_RAW_TEXT.sub("", _COMMENT.sub("", content)), _tag_gap)
        # Indentation in HTML is layout, not Markdown: left in, it would make code blocks.
        text = "\n".join(line.strip() for line in text.split("\n"))
        if not text.strip():
            return []
        if depth >= _MAX_DEPTH:
            return ["\n".join(line for line in text.split("\n") if line)]
        return self.blocks(text, depth=depth + 1, flat=flat)

    def front_matter(self, content: str, depth: int, flat: bool) -> list[Block]:
        """A top `---` block: dropped when it is YAML front matter, else read as Markdown."""
        try:
            if isinstance(yaml.safe_load(content), dict):
                return []
        except yaml.YAMLError:
            pass
        if depth >= _MAX_DEPTH:
            return [content]
        return self.blocks(content, depth=depth + 1, flat=flat)


def _tag_gap(name: str | None) -> str:
    return "\n" if _BREAKING.fullmatch(name or "") else ""


def _without_tags(text: str, gap: Callable[[str | None], str] = lambda _: "") -> str:
    """`text` with every tag-like run of `_TAG` replaced by `gap(its tag name)`, left to right as
    `_TAG.sub` would, in one pass: a processing instruction, declaration or CDATA section that is
    never closed is looked for once, not again from every `<` that opens one."""
    out: list[str] = []
    at = 0
    closers: dict[str, int] = {}  # closer -> where it was last found (-1: nowhere after that)

    def closed(closer: str, start: int) -> int:
        found = closers.get(closer)
        if found is None or 0 <= found < start:
            found = closers[closer] = text.find(closer, start)
        return -1 if found < 0 else found + len(closer)

    position = text.find("<")
    while position >= 0:
        end, name = -1, None
        if simple := _SIMPLE_TAG.match(text, position):
            end, name = simple.end(), simple.group(1)
        elif text.startswith("<?", position):
            end = closed("?>", position + 2)
        elif text.startswith("<!", position) and text[position + 2 : position + 3].isalpha():
            end = closed(">", position + 3)
        elif text.startswith("<![CDATA[", position):
            end = closed("]]>", position + 9)
        if end < 0:
            position = text.find("<", position + 1)
            continue
        out.extend([text[at:position], gap(name)])
        at = end
        position = text.find("<", end)
    out.append(text[at:])
    return "".join(out)


def _label(title: str) -> str:
    """An admonition's or a tab's title as the bold line that labels what follows ("" for none)."""
    return f"**{title}**" if title.strip() else ""


def _without_attributes(title: str) -> tuple[str, str | None]:
    """A heading's text without attributes such as `{#id}` at its end (`_ATTRIBUTES`), found from
    the last brace rather than from every space; and the id they give, if any."""
    stripped = title.rstrip()
    start = stripped.rfind("{")
    if stripped.endswith("}") and start >= 0 and _ATTRIBUTES.fullmatch(stripped[start:]):
        found = _ID.search(stripped[start + 1 : -1])
        return stripped[:start], None if found is None else found.group(1)
    return title, None


def _inline(node: SyntaxTreeNode) -> str:
    """Inline markup reduced to its text; code spans kept in backticks."""
    parts: list[str] = []
    for child in node.children:
        kind = child.type
        if kind == "text":
            # What reads as a tag but is not valid HTML (`<Tabs.Item>`, `<a href=x">`) is markup.
            parts.append(_without_tags(child.content))
        elif kind == "text_special":
            parts.append(child.content)
        elif kind == "code_inline":
            parts.append(_code_span(child.content))
        elif kind in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif kind == "html_inline":
            match = _TAG.fullmatch(child.content.strip())
            parts.append(" " if match and _BREAKING.fullmatch(match.group(1) or "") else "")
        elif not kind.startswith("footnote"):
            parts.append(_inline(child))
    return "".join(parts)


def _wholly_bold(inline: SyntaxTreeNode) -> SyntaxTreeNode | None:
    """The bold span a paragraph is made of and nothing else ("**Example**", a label over what
    follows, or a reStructuredText tab's or admonition's title); None for any other paragraph."""
    parts = [c for c in inline.children if not (c.type == "text" and not c.content.strip())]
    return parts[0] if len(parts) == 1 and parts[0].type == "strong" else None


def _paragraph(inline: SyntaxTreeNode) -> str:
    lines = [line.strip() for line in resolve(_inline(inline)).split("\n")]
    # A line that would read as a fence in the passage text is escaped, so it stays prose.
    return "\n".join("\\" + line if _FENCE_LIKE.match(line) else line for line in lines if line)


def _heading_title(inline: SyntaxTreeNode) -> str:
    """A heading as cited: its text, attributes such as `{#id}` dropped, spaces collapsed."""
    return _heading_parts(inline)[0]


def _heading_parts(inline: SyntaxTreeNode) -> tuple[str, str | None]:
    """A heading's text as cited (`_heading_title`) and the id its attributes give, if any."""
    title, anchor = _without_attributes(_inline(inline))
    return " ".join(title.split()), anchor


def _code_span(content: str) -> str:
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", content)), default=0) + 1)
    pad = " " if content[:1] == "`" or content[-1:] == "`" else ""
    return f"{ticks}{pad}{content}{pad}{ticks}"


def _table(node: SyntaxTreeNode) -> str:
    """A table as a pipe table: header, rule, then the body rows, cells as plain text."""
    rows: list[str] = []
    for section in node.children:
        for row in section.children:
            cells = [_cell(cell) for cell in row.children]
            rows.append("| " + " | ".join(cells) + " |")
            if section.type == "thead":
                rows.append("| " + " | ".join("---" for _ in cells) + " |")
    return "\n".join(rows)


def _cell(cell: SyntaxTreeNode) -> str:
    text = " ".join(_inline(cell.children[0]).split()) if cell.children else ""
    return _UNESCAPED_PIPE.sub(r"\\|", text)
