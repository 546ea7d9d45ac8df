"""reStructuredText documents, parsed by docutils and written out as Markdown-shaped text.

docutils parses the text into a document tree, which is walked: sections become headings by
depth, literal blocks code fences, lists `- ` and `1. ` lines, admonitions and footnotes keep
their text, tables become Markdown tables. docutils' own reports (`system_message` nodes), comments
and targets are left out. The parser is set up for text from anywhere: it reads no configuration
file and no other file (`include`, `raw` and file options are refused), runs no raw output, and
reports nothing anywhere, so a problem in one document never reaches the log or stops a build.
A document nested deeper than docutils can parse (it recurses once a level) is read as plain text,
with a warning; lists are written nested at most `markup.MAX_LIST_DEPTH` deep.
"""

from __future__ import annotations

import io
import re
from functools import cache

from docutils import nodes
from docutils.core import publish_doctree
from docutils.frontend import Values, get_default_settings
from docutils.parsers.rst import Parser
from docutils.readers.standalone import Reader

from app.knowledge.corpus import CorpusFile
from app.knowledge.readers.markup import (
    DEEP_LISTS_WARNING,
    Markdown,
    UnreadableDocument,
    Warn,
    code_span,
    escape,
    file_name,
    unescape,
)
from app.knowledge.readers.text import read_text

#: What a reader is told of a document nested too deeply for docutils (whose parser recurses once
#: a level, up to Python's limit): it is read as plain text instead.
TOO_DEEP_FOR_DOCUTILS = (
    "it nests too deeply for docutils, so it is read as plain text: nest its lists, quotes or sections "
    "less deeply to have it read as reStructuredText"
)
#: An unknown role's text longer than this is kept as written (a role is a few words; looking into
#: a long one for its target would cost its length squared).
_MAX_ROLE_CHARS = 1000

# docutils' report levels run from 1 (info) to 4 (severe): 5 is above them all.
_NEVER = 5
_ERROR = 3

# An interpreted text role docutils does not know (Sphinx's :ref:, :doc:, ...) is kept as its
# source; its text (without a `<target>`) is what a reader sees.
_ROLE = re.compile(r"\A(?::[\w.+:-]+:)?`(.*?)`(?::[\w.+:-]+:)?_?\Z", re.S)
_TARGET = re.compile(r"\s*<[^<>]*>\Z")

# Left out of the text: docutils' reports, comments, targets, substitution definitions, raw
# output, images (they hold no text) and page decoration.
_DROPPED = (nodes.Invisible, nodes.system_message, nodes.raw, nodes.image, nodes.decoration, nodes.meta)
_TEXT = (nodes.paragraph, nodes.title, nodes.subtitle, nodes.rubric, nodes.caption, nodes.term)
_CODE = (nodes.literal_block, nodes.doctest_block, nodes.math_block)


def read_rst(text: str, source: str, *, warn: Warn | None = None) -> CorpusFile:
    """The reStructuredText document `source` holding `text`, as Markdown-shaped text; `warn`
    hears, once, of lists nested deeper than `markup.MAX_LIST_DEPTH` (written as text), or of a
    document nested too deeply for docutils, which is read as plain text.

    Its title is the document's title (its one top-level section's), else the file name.
    Raises `UnreadableDocument` when docutils fails on the text, or stops reading it at an error
    (a line over docutils' line length limit).
    """
    out = Markdown()
    try:
        document = publish_doctree(text, settings=_settings())
        _Walk(out).blocks(document, 1)
    except RecursionError as error:
        if warn is not None:
            warn(f"{TOO_DEEP_FOR_DOCUTILS} ({error})")
        return read_text(text, source)
    except Exception as error:  # docutils has no error class of its own for text it cannot take
        raise UnreadableDocument(
            f"docutils cannot parse it as reStructuredText ({type(error).__name__}: {error}): check it "
            "with the docutils command and correct what it reports"
        ) from None
    if (stop := _stopped_at(document)) is not None:
        raise UnreadableDocument(f"docutils reads no text from it ({stop}): correct what it reports")
    rendered = out.render()
    if out.too_deep and warn is not None:
        warn(DEEP_LISTS_WARNING)
    return CorpusFile(source=source, title=_title(document) or file_name(source), text=rendered)


def _settings() -> Values:
    """Settings for one document: a copy, as docutils writes to the settings it is given."""
    settings = _defaults().copy()
    settings.warning_stream = io.StringIO()
    return settings


@cache
def _defaults() -> Values:
    """docutils' defaults (no configuration file is read), made safe for text from anywhere."""
    settings = get_default_settings(Parser, Reader)
    settings.report_level = _NEVER
    settings.halt_level = _NEVER
    # An error in the text is raised to the caller, never printed (docutils' default for a command).
    settings.traceback = True
    settings.file_insertion_enabled = False
    settings.raw_enabled = False
    # The title is found here (`_title`): the document's sections then keep their depths.
    settings.doctitle_xform = False
    settings.syntax_highlight = "none"
    # Ids as Sphinx makes them: a repeated title's section is `id1`, `id2`, ...
    settings.auto_id_prefix = "id"
    return settings


def _section_id(section: nodes.Element) -> str | None:
    """The id a site gives a section: its first label's (`.. _label:` before it), else its own."""
    ids = section["ids"]
    return ids[1] if len(ids) > 1 else (ids[0] if ids else None)


def _stopped_at(document: nodes.document) -> str | None:
    """What docutils said when it stopped reading the text (a line over its length limit): the
    document is then that one error and nothing else. None when it read the text."""
    if len(document.children) != 1 or not isinstance(stop := document.children[0], nodes.system_message):
        return None
    if stop.get("level", 0) < _ERROR or any(isinstance(c, nodes.literal_block) for c in stop.children):
        return None  # a directive it does not know, which was all the document held
    return " ".join((stop.children[0] if stop.children else stop).astext().split())


def _title(document: nodes.document) -> str:
    """The document's title: the title of its section when that is all it holds (what docutils
    itself promotes to a document title), else ""."""
    body = [child for child in document.children if not isinstance(child, nodes.PreBibliographic)]
    if len(body) != 1 or body[0] is not document.children[-1] or not isinstance(body[0], nodes.section):
        return ""
    titles = [child for child in body[0].children if isinstance(child, nodes.title)]
    return " ".join(unescape(_inline(titles[0])).split()) if titles else ""


class _Walk:
    """Writes the block nodes of a document tree into `out`."""

    def __init__(self, out: Markdown) -> None:
        self.out = out

    def blocks(self, node: nodes.Element, depth: int) -> None:
        for child in node.children:
            self.block(child, depth)

    def block(self, node: nodes.Node, depth: int) -> None:
        out = self.out
        if isinstance(node, nodes.Text):
            out.text(escape(node.astext()))
        elif not isinstance(node, nodes.Element) or isinstance(node, _DROPPED):
            return
        elif isinstance(node, nodes.section):
            titles = [child for child in node.children if isinstance(child, nodes.title)]
            if titles:
                out.heading(depth, _inline(titles[0]), _section_id(node))
            for child in node.children:
                if child not in titles[:1]:
                    self.block(child, depth + 1)
        elif isinstance(node, nodes.topic) and "contents" in node["classes"]:
            return  # a table of contents repeats the headings
        elif isinstance(node, _TEXT):
            out.text(" ".join(_inline(node).split()))
        elif isinstance(node, _CODE):
            languages = [name for name in node["classes"] if name != "code"]
            out.fence(node.astext(), languages[0] if languages else "")
        elif isinstance(node, (nodes.bullet_list, nodes.enumerated_list)):
            self.items(node, depth)
        elif isinstance(node, nodes.table):
            self.table(node)
        elif isinstance(node, nodes.line_block):
            out.text("\n".join(" ".join(_inline(line).split()) for line in node.findall(nodes.line)))
        elif isinstance(node, nodes.field):
            name = escape(" ".join(node.children[0].astext().split()))
            body = node.children[1:]
            only = body[0].children if len(body) == 1 and isinstance(body[0], nodes.Element) else []
            if len(only) == 1 and isinstance(only[0], nodes.paragraph):
                out.text(f"{name}: {' '.join(_inline(only[0]).split())}")
                return
            out.text(f"{name}:")
            for child in body:
                self.block(child, depth)
        elif isinstance(node, nodes.Bibliographic) and not isinstance(node, nodes.field):
            out.text(f"{node.tagname.capitalize()}: {escape(node.astext())}")
        elif isinstance(node, (nodes.footnote, nodes.citation)):
            labels = [child for child in node.children if isinstance(child, nodes.label)]
            if labels:
                out.text(escape(f"[{labels[0].astext()}]"))
            for child in node.children:
                if child not in labels:
                    self.block(child, depth)
        elif isinstance(node, nodes.option_list_item):
            out.text("  ".join(escape(child.astext()) for child in node.children))
        elif isinstance(node, nodes.Admonition) and not isinstance(node, nodes.admonition):
            out.text(f"{node.tagname.capitalize()}:")  # a generic admonition has a title of its own
            self.blocks(node, depth)
        elif isinstance(node, nodes.attribution):
            out.text(f"— {' '.join(_inline(node).split())}")
        else:  # block quotes, containers, definitions, figures, list items and the like
            self.blocks(node, depth)

    def items(self, node: nodes.Element, depth: int) -> None:
        number = node.get("start", 1) if isinstance(node, nodes.enumerated_list) else None
        for item in node.children:
            if isinstance(item, nodes.list_item):
                self.out.open_item("- " if number is None else f"{number}. ")
                self.blocks(item, depth)
                self.out.close_item()
                number = None if number is None else number + 1
        self.out.end_list()

    def table(self, node: nodes.Element) -> None:
        for title in node.findall(nodes.title):
            self.out.text(" ".join(_inline(title).split()))
        header: list[list[str]] = []
        rows: list[list[str]] = []
        for group in node.findall(nodes.tgroup):
            for part in group.children:
                kept = header if isinstance(part, nodes.thead) else rows
                kept.extend([_cell(entry) for entry in row.children] for row in part.findall(nodes.row))
        self.out.table(header + rows, header=bool(header))


def _cell(entry: nodes.Node) -> str:
    if not isinstance(entry, nodes.Element):
        return escape(entry.astext())
    parts = [_inline(c) if isinstance(c, _TEXT) else escape(c.astext()) for c in entry.children]
    return " ".join(" ".join(parts).split())


def _inline(node: nodes.Element) -> str:
    """The inline content of `node` as inline Markdown: text escaped, literals as code spans,
    footnote references as `[1]`, unknown roles as their text, docutils' reports left out."""
    parts: list[str] = []
    for child in node.children:
        if isinstance(child, nodes.Text):
            parts.append(escape(child.astext()))
        elif isinstance(child, _DROPPED) and not isinstance(child, nodes.target):
            continue  # an inline target (_`name`) holds text of the sentence
        elif isinstance(child, nodes.literal):
            parts.append(code_span(child.astext()))
        elif isinstance(child, nodes.problematic):
            parts.append(escape(_role_text(child.astext())))
        elif isinstance(child, (nodes.footnote_reference, nodes.citation_reference)):
            parts.append(escape(f"[{child.astext()}]"))
        elif isinstance(child, nodes.Element):
            parts.append(_inline(child))
    return "".join(parts)


def _role_text(raw: str) -> str:
    """`:ref:\\`Install <install>\\`` as read: `Install`; anything else as written."""
    match = _ROLE.match(raw) if len(raw) <= _MAX_ROLE_CHARS else None
    if match is None:
        return raw
    text = _TARGET.sub("", match.group(1)).lstrip("~!")
    return text or match.group(1)
