"""HTML documents, parsed by the standard library's HTML parser and written out as Markdown-shaped
text: only what a reader of the page sees, structured so that passages are cut at its headings.

`h1` to `h6` become headings (`h4` and deeper as `####`), `pre` code fences, `li` list lines,
tables Markdown tables (a table laid out with headings, lists or code in its cells gives its cells'
blocks in order instead), `code` code spans, and paragraphs, `div`s and the like blocks of their
own; `br` breaks a line. Entities are decoded. Left out entirely: the page's machinery and
furniture (`script`, `style`, `noscript`, `template`, `svg`, `nav`, `header`, `footer`, `aside`,
`form`, and any element with the role of one of them, `role="navigation"`, or the class of a
navigation bar, such as texinfo's `nav-panel`), the `head` but its `title`, comments, and any
element that is hidden (the `hidden` attribute, `aria-hidden="true"`, or an inline style of
`display: none` or `visibility: hidden`).

Tags a page leaves open are closed as browsers close them (a `p` by the next block, an `li` by
the next `li`, the `head` by the first tag of the body), so a page with sloppy markup still reads.

Elements are read nested at most `MAX_DEPTH` deep: the tags of deeper ones are passed over and
their text is text of the element at that depth (an element left out is still left out), with
one warning; lists are written nested at most `markup.MAX_LIST_DEPTH` deep. Code inside code is
one code span, the outermost's. So a page of unclosed elements in elements is read in time and
space linear in its length.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser

from app.knowledge.corpus import CorpusFile
from app.knowledge.readers.html_furniture import unread
from app.knowledge.readers.markup import (
    DEEP_LISTS_WARNING,
    Heard,
    Markdown,
    UnreadableDocument,
    Warn,
    code_span,
    escape,
    file_name,
    unescape,
)

#: Elements nested deeper than this are read as text of the element at this depth.
MAX_DEPTH = 100
#: What a reader is told of a page whose elements nest deeper than that.
DEEP_ELEMENTS_WARNING = (
    f"its elements nest more than {MAX_DEPTH} deep; what is deeper is read as text of the element at "
    f"depth {MAX_DEPTH}"
)
#: A page this long or longer is fed to the parser in this many pieces, its progress told
#: after each; a shorter one at once.
_PIECES = 32
_PIECEWISE_FROM = 1 << 20

#: Elements left out with everything in them.
DROPPED = frozenset(
    {"script", "style", "noscript", "template", "svg", "nav", "header", "footer", "aside", "form", "title"}
)

_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "keygen", "link", "meta", "param"}
    | {"source", "track", "wbr"}
)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 4, "h6": 4}
# Elements that start a block of their own: the text before them and after them are apart.
_BLOCKS = frozenset(
    {"address", "article", "blockquote", "body", "caption", "center", "dd", "details", "dialog", "div"}
    | {"dl", "dt", "fieldset", "figcaption", "figure", "hgroup", "hr", "html", "legend", "li", "main"}
    | {"menu", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead"}
    | {"tr", "ul", *_HEADINGS}
)
_CODE = frozenset({"code", "kbd", "samp", "tt"})
_HEAD = frozenset({"base", "link", "meta", "noscript", "script", "style", "template", "title"})
# What a start tag closes when it is open (and no boundary lies between): (closed, boundaries).
_P = (frozenset({"p"}), frozenset({"button", "caption", "html", "table", "td", "th", "template"}))
_CELLS = frozenset({"td", "th"})
_ROWS = frozenset({"tr", "td", "th"})
_SECTIONS = frozenset({"thead", "tbody", "tfoot"})
_IMPLIED: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "li": (frozenset({"li"}), frozenset({"ul", "ol", "menu", "table"})),
    "dt": (frozenset({"dt", "dd"}), frozenset({"dl", "table"})),
    "dd": (frozenset({"dt", "dd"}), frozenset({"dl", "table"})),
    "tr": (_ROWS, frozenset({"table", *_SECTIONS})),
    "td": (_CELLS, frozenset({"tr", "table"})),
    "th": (_CELLS, frozenset({"tr", "table"})),
    **{name: (_SECTIONS | _ROWS, frozenset({"table"})) for name in _SECTIONS},
}
_SPACE = re.compile(r"\s+")
# What a <title> puts between the page's heading and the site's name: " — ", " | ", " - ", ...
_SITE_SUFFIX = re.compile(r"\s+[\u2014\u2013|\u00b7:-]\s|$")


def read_html(text: str, source: str, *, heard: Heard | None = None, warn: Warn | None = None) -> CorpusFile:
    """The HTML document `source` holding `text`, as Markdown-shaped text of what it shows;
    `heard` hears the share of a large one read, `warn` once of each nesting read as text.

    Its title is its `<title>` (its first `<h1>` when the title is that heading and the site's
    name after it), else its first `<h1>`, else the file name. Raises
    `UnreadableDocument` when the parser gives up on the text.
    """
    page = _Page()
    try:
        if heard is None or len(text) < _PIECEWISE_FROM:
            page.feed(text)
        else:
            size = -(-len(text) // _PIECES)
            for start in range(0, len(text), size):
                page.feed(text[start : start + size])
                heard(min(1.0, (start + size) / len(text)))
        page.close()
    except Exception as error:  # the parser raises AssertionError (and others) on markup it gives up on
        raise UnreadableDocument(
            f"the HTML parser gives up on it ({type(error).__name__}: {error}): correct that markup"
        ) from None
    title = " ".join(page.title.split())
    if page.first_h1 and title.startswith(page.first_h1) and _SITE_SUFFIX.match(title[len(page.first_h1) :]):
        # `Install — Flask Documentation`: the page's own heading, then the site's name.
        title = page.first_h1
    title = title or page.first_h1 or file_name(source)
    rendered = page.out.render()
    if warn is not None:
        if page.too_deep:
            warn(DEEP_ELEMENTS_WARNING)
        if page.deep_lists or page.out.too_deep:
            warn(DEEP_LISTS_WARNING)
    return CorpusFile(source=source, title=title, text=rendered)


@dataclass
class _Open:
    """An element open: its tag, whether it is left out, and what its start began."""

    tag: str
    dropped: bool
    root: bool = False  # the outermost element of what is left out
    title: bool = False  # the page's <title>, whose text is the document's title
    did: str = ""


@dataclass
class _Table:
    header_section: bool = False  # inside <thead>
    rows: list[tuple[bool, list[tuple[str, Markdown]]]] = field(default_factory=list)  # (in thead, cells)


class _Page(HTMLParser):
    """Writes what a page shows into `out` as it is parsed; `title` and `first_h1` are found."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = Markdown()
        self.title = ""
        self.first_h1 = ""
        self._writers = [self.out]  # a table cell's blocks are written apart, then placed
        self._open: list[_Open] = []
        self._counts: Counter[str] = Counter()  # of the tags open, to know one is without a search
        self._inline: list[str] = []  # the text of the block being read
        self._code: list[int] = []  # where each open code element's text starts in _inline
        self._heading: int | None = None
        # The id of the heading open (its own, or an anchor's inside it), and of an element just
        # before it (an enclosing <section id>, an <a name>) with no text between: its page's anchor.
        self._heading_id: str | None = None
        self._id_before: str | None = None
        self._pre: list[str] | None = None
        self._lists: list[list[int] | None] = []  # for each list open: [next number], or None
        self._tables: list[_Table] = []
        self._title_text: list[str] | None = None
        #: Whether elements nested deeper than `MAX_DEPTH`, or lists (in a table cell) deeper than
        #: `markup.MAX_LIST_DEPTH`, were read as text.
        self.too_deep = False
        self.deep_lists = False

    # The parser's callbacks.

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._counts["head"] and tag not in _HEAD:
            self._close("head")
        # At the cap, a tag closes nothing and starts nothing (what it holds is text of the element
        # open), so that no start looks further back than `MAX_DEPTH` elements.
        deep = len(self._open) >= MAX_DEPTH
        if tag in _IMPLIED and not deep:
            self._close_implied(*_IMPLIED[tag])
        if tag in _BLOCKS and self._pre is None and not deep:
            self._close_implied(*_P)
        attributes = dict(attrs)
        dropped = self._dropped() or tag in DROPPED or unread(attributes)
        if tag in _VOID:
            if not dropped:
                self._void(tag)
            return
        entry = _Open(tag, dropped, root=dropped and not self._dropped())
        self._open.append(entry)
        self._counts[tag] += 1
        if deep:
            self.too_deep = True
            return
        if tag == "title" and entry.root and not self.title and self._title_text is None:
            entry.title = True
            self._title_text = []
        if not dropped:
            entry.did = self._start(tag, attributes)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:  # <div/> as XHTML means it: opened and closed
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "br":  # </br> is read as <br> by browsers too
            self.handle_starttag(tag, [])
        elif self._counts[tag]:
            self._close(tag)
        elif tag in _BLOCKS and not self._dropped():
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._title_text is not None:
            self._title_text.append(data)
        if self._counts["head"] and data.strip() and not self._dropped():
            self._close("head")  # text is where the body starts
        if self._dropped():
            return
        if self._heading is None and data.strip():
            self._id_before = None
        if self._pre is not None:
            self._pre.append(data)
        else:  # the text of a code element is taken as written
            self._inline.append(_SPACE.sub(" ", data if self._code else escape(data)))

    def close(self) -> None:
        super().close()
        while self._open:
            self._pop()
        self._flush()

    # What elements do.

    def _start(self, tag: str, attrs: dict[str, str | None]) -> str:
        """Begin element `tag`; what it began (for `_end`): "" when nothing."""
        if self._pre is not None:
            return ""  # inside <pre> everything is text as written
        if tag in _BLOCKS:
            self._flush()
        given = attrs.get("id") or (attrs.get("name") if tag == "a" else None)
        if tag in _HEADINGS:
            self._heading = _HEADINGS[tag]
            self._heading_id = given
            return "heading"
        if given and self._heading is not None:
            self._heading_id = self._heading_id or given
        elif given:
            self._id_before = given
        if tag == "pre":
            self._pre = []
            return "pre"
        if tag in _CODE:
            self._code.append(len(self._inline))
            return "code"
        if tag in ("ul", "ol", "menu"):
            start = (attrs.get("start") or "1").strip()
            self._lists.append(None if tag != "ol" else [int(start) if start.lstrip("-").isdigit() else 1])
            return "list"
        if tag == "li":
            numbers = self._lists[-1] if self._lists else None
            self._writer().open_item("- " if numbers is None else f"{numbers[0]}. ")
            if numbers is not None:
                numbers[0] += 1
            return "item"
        if tag == "table":
            self._tables.append(_Table())
            return "table"
        if self._tables and tag in _SECTIONS:
            self._tables[-1].header_section = tag == "thead"
        elif self._tables and tag == "tr":
            self._tables[-1].rows.append((self._tables[-1].header_section, []))
        elif self._tables and tag in _CELLS:
            table = self._tables[-1]
            if not table.rows:
                table.rows.append((table.header_section, []))
            cell = Markdown()
            table.rows[-1][1].append((tag, cell))
            self._writers.append(cell)
            return "cell"
        return "block" if tag in _BLOCKS else ""

    def _end(self, did: str) -> None:
        """End an element whose start did `did`."""
        if did == "pre":
            code = "".join(self._pre or ())
            self._pre = None
            # A line end right after <pre> is not part of its text.
            self._writer().fence(code.removeprefix("\r\n").removeprefix("\n"))
            return
        if did == "code":
            at = min(self._code.pop(), len(self._inline))
            if not self._code:  # code in code is the outermost's span, not a span in a span
                self._inline[at:] = [code_span("".join(self._inline[at:]))]
            return
        if did:
            self._flush()
        if did == "heading":
            self._heading = None
        elif did == "item":
            self._writer().close_item()
        elif did == "list":
            self._lists.pop()
            self._writer().end_list()
        elif did == "cell":
            self.deep_lists |= self._writers.pop().too_deep
        elif did == "table":
            self._place(self._tables.pop())

    def _void(self, tag: str) -> None:
        if tag == "br":
            (self._pre if self._pre is not None else self._inline).append("\n")
        elif tag == "hr":
            self._flush()

    # Keeping the open elements.

    def _dropped(self) -> bool:
        return bool(self._open) and self._open[-1].dropped

    def _close(self, tag: str) -> None:
        """Close the innermost open `tag` and every element open inside it."""
        while self._open and self._pop() != tag:
            pass

    def _close_implied(self, closed: frozenset[str], boundaries: frozenset[str]) -> None:
        """Close the innermost open element of `closed` unless a boundary (or the edge of what is
        left out) is nearer."""
        if not any(self._counts[name] for name in closed):
            return
        for entry in reversed(self._open):
            if entry.tag in closed:
                self._close(entry.tag)
                return
            if entry.tag in boundaries or entry.root:
                return

    def _pop(self) -> str:
        entry = self._open.pop()
        self._counts[entry.tag] -= 1
        if entry.title and self._title_text is not None:
            self.title = "".join(self._title_text)
            self._title_text = None
        if not entry.dropped:
            self._end(entry.did)
        return entry.tag

    # Writing.

    def _writer(self) -> Markdown:
        return self._writers[-1]

    def _flush(self) -> None:
        """Write the text read since the last block began: as a heading inside one."""
        if self._pre is not None:
            return
        text = "".join(self._inline)
        self._inline.clear()
        self._code = [0 for _ in self._code]
        if not text.strip():
            return
        if self._heading is None:
            self._writer().text(text)
            return
        self._writer().heading(self._heading, text, self._heading_id or self._id_before)
        self._heading_id = self._id_before = None
        if self._heading == 1 and not self.first_h1:
            self.first_h1 = " ".join(unescape(text).split())

    def _place(self, table: _Table) -> None:
        """A table read: a Markdown table when its cells hold only text, else its cells' blocks."""
        rows = [(header, [(tag, cell.finished()) for tag, cell in cells]) for header, cells in table.rows]
        rows = [(header, cells) for header, cells in rows if cells]
        if not rows:
            return
        writer = self._writer()
        if all(kind == "text" for _, cells in rows for _, blocks in cells for kind, _ in blocks):
            header = rows[0][0] or all(tag == "th" for tag, _ in rows[0][1])
            texts = [[" ".join(text for _, text in blocks) for _, blocks in cells] for _, cells in rows]
            writer.table(texts, header=header)
            return
        for _, cells in rows:
            for _, blocks in cells:
                writer.extend(blocks)
