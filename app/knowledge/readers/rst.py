"""reStructuredText documents, parsed by docutils and written out as Markdown-shaped text.

docutils parses the text into a document tree, which is walked: sections become headings by
depth, literal blocks code fences, lists `- ` and `1. ` lines, admonitions and footnotes keep
their text, tables become Markdown tables. docutils' own reports (`system_message` nodes), comments,
targets and the document's metadata (its docinfo fields) are left out. Sphinx's directives are
read as `rst_sphinx` says, its roles as Sphinx shows them (`_role`); any other directive docutils
does not know gives its argument and content. What is left of inline markup docutils did not read
as such (backticks of interpreted text inside a word) goes (`_prose`).

The parser is set up for text from anywhere: it reads no configuration file and no other file
(`include`, `raw` and file options are refused), runs no raw output, and reports nothing
anywhere, so a problem in one document never reaches the log or stops a build.
A document nested deeper than docutils can parse (it recurses once a level) is read as plain text,
with a warning; lists are written nested at most `markup.MAX_LIST_DEPTH` deep.
"""

from __future__ import annotations

import io
import re
import textwrap
from functools import cache

from docutils import nodes
from docutils.core import publish_doctree
from docutils.frontend import Values, get_default_settings
from docutils.parsers.rst import Parser
from docutils.readers.standalone import Reader

from app.knowledge.corpus import CorpusFile
from app.knowledge.readers import rst_sphinx
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

# An interpreted text role docutils does not know (Sphinx's :ref:, :doc:, :class:, ...) is kept
# as its source: its name and its text (without a `<target>`) are read from it (`_role`).
_ROLE = re.compile(r"\A(?::([\w.+:-]+):)?`(.*?)`(?::([\w.+:-]+):)?_?\Z", re.S)
_TARGET = re.compile(r"\s*<[^<>]*>\Z")
# Sphinx's roles whose text it shows as code: objects of its domains, and the like.
_CODE_ROLES = frozenset(
    {"func", "meth", "class", "attr", "data", "exc", "obj", "mod", "const", "type", "member", "var"}
    | {"macro", "struct", "union", "enum", "enumerator", "expr", "texpr", "envvar", "option", "file"}
    | {"samp", "kbd", "makevar", "regexp", "token", "command", "program", "prop", "decorator"}
)
# Runs of backticks in text: what is left of inline markup docutils did not read as such.
_TICKS = re.compile(r"`+")
# The message of docutils' report of a directive it does not know.
_UNKNOWN_DIRECTIVE = "Unknown directive type"
# Code blocks whose language says they have none.
_NO_LANGUAGE = frozenset({"none"})

# Left out of the text: docutils' reports, comments, targets, substitution definitions, raw
# output, images (they hold no text) and page decoration.
_DROPPED = (
    nodes.Invisible,
    nodes.system_message,
    nodes.raw,
    nodes.image,
    nodes.decoration,
    nodes.meta,
    nodes.docinfo,
)
_BEFORE_TEXT = (nodes.title, nodes.subtitle, nodes.PreBibliographic)
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
        _drop_metadata(document)
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
    rst_sphinx.register()
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
    """The document's title: the title of its first section, whatever comes before it (a field
    list, an image, a paragraph), else ""."""
    section = next(iter(document.findall(nodes.section)), None)
    titles = [] if section is None else [c for c in section.children if isinstance(c, nodes.title)]
    return " ".join(unescape(_inline(titles[0])).split()) if titles else ""


def _drop_metadata(document: nodes.document) -> None:
    """Take the document's metadata out of it: the field list right after its first top-level
    section title (`:Author:`, `:Version:`: the docinfo of a document whose title docutils
    promotes). A field list at its very top (`:orphan:`, `:tocdepth: 2`) is docinfo already, and
    left out as such. Only comments, targets and the like may come between title and fields."""
    section = next((c for c in document.children if isinstance(c, nodes.section)), None)
    rest = [] if section is None else [c for c in section.children if not isinstance(c, _BEFORE_TEXT)]
    if section is not None and rest and isinstance(rest[0], nodes.field_list):
        section.remove(rest[0])


class _Walk:
    """Writes the block nodes of a document tree into `out`."""

    def __init__(self, out: Markdown) -> None:
        self.out = out
        self.in_unknown = False  # reading the content of a directive docutils does not know

    def blocks(self, node: nodes.Element, depth: int) -> None:
        for child in node.children:
            self.block(child, depth)

    def block(self, node: nodes.Node, depth: int) -> None:
        out = self.out
        if isinstance(node, nodes.Text):
            out.text(_prose(str(node)))
        elif isinstance(node, nodes.system_message) and (unknown := _unknown_directive(node)) is not None:
            self.unknown(unknown, depth)
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
        elif rst_sphinx.LABEL in node["classes"] or (
            isinstance(node.parent, nodes.admonition) and isinstance(node, nodes.title)
        ):
            out.text(f"**{' '.join(_inline(node).split())}**")  # a title labelling what follows
        elif isinstance(node, _TEXT):
            out.text(" ".join(_inline(node).split()))
        elif isinstance(node, _CODE):
            languages = [name for name in node["classes"] if name != "code"]
            language = languages[0] if languages else ""
            out.fence(node.astext(), "" if language in _NO_LANGUAGE else language)
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

    def unknown(self, text: str, depth: int) -> None:
        """The argument and content of a directive docutils does not know, read as
        reStructuredText; inside such a directive's content, as plain paragraphs (so that no text
        is parsed more than twice)."""
        if self.in_unknown:
            for paragraph in text.split("\n\n"):
                self.out.text(escape(" ".join(paragraph.split())))
            return
        self.in_unknown = True
        try:
            self.blocks(publish_doctree(text, settings=_settings()), depth)
        finally:
            self.in_unknown = False

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
    parts = [
        _inline(c) if isinstance(c, _TEXT) else escape(c.astext())
        for c in entry.children
        if not isinstance(c, _DROPPED)
    ]
    return " ".join(" ".join(parts).split())


def _inline(node: nodes.Element) -> str:
    """The inline content of `node` as inline Markdown: text escaped, literals as code spans,
    footnote references as `[1]`, unknown roles as their text, docutils' reports left out."""
    parts: list[str] = []
    for child in node.children:
        if isinstance(child, nodes.Text):
            parts.append(_prose(str(child)))
        elif isinstance(child, _DROPPED) and not isinstance(child, nodes.target):
            continue  # an inline target (_`name`) holds text of the sentence
        elif isinstance(child, nodes.literal):
            parts.append(code_span(child.astext()))
        elif isinstance(child, nodes.problematic):
            parts.append(_role(child.astext()))
        elif isinstance(child, (nodes.footnote_reference, nodes.citation_reference)):
            parts.append(escape(f"[{child.astext()}]"))
        elif isinstance(child, nodes.Element):
            parts.append(_inline(child))
    return "".join(parts)


def _role(raw: str) -> str:
    """A role docutils does not know, as Sphinx shows it, in inline Markdown: its text, or the
    title before a `<target>`; a `~` before a dotted name keeps its last part, `!` goes; `:doc:`
    names its document (`tutorial/index`: `tutorial`); the roles of objects (`:class:`,
    `:func:`, ...) and of things typed (`:envvar:`, `:kbd:`, ...) are code spans. Anything else
    as written."""
    match = _ROLE.match(raw) if len(raw) <= _MAX_ROLE_CHARS else None
    if match is None:
        return escape(raw)
    role = (match.group(1) or match.group(3) or "").rsplit(":", 1)[-1]
    written = match.group(2)
    text = _TARGET.sub("", written)
    if not text or text == written:  # no title of its own: what its target shows
        text = written.strip().strip("<>").lstrip("!")
        if text.startswith("~"):
            text = text[1:].rsplit(".", 1)[-1]
        if role == "doc":
            text = text.removesuffix("/index").rsplit("/", 1)[-1]
    if role == "menuselection":
        text = text.replace("-->", "\u2023")
    text = " ".join(text.split())
    return code_span(text) if role in _CODE_ROLES else escape(text)


def _prose(text: str) -> str:
    """Text of a docutils `Text` node (escaped characters marked by a NUL before them) as inline
    Markdown, without what is left of inline markup docutils did not read as markup (interpreted
    text inside a word, markup nested in markup, which reStructuredText has not): ``code`` is a
    code span, `text` and `text <target>`_ their text. A backtick with no partner stays."""
    out: list[str] = []
    at = 0
    opener: re.Match[str] | None = None
    for run in _TICKS.finditer(text):
        if run.start() and text[run.start() - 1] == "\x00":
            continue  # an escaped backtick is one
        if opener is None or len(opener.group()) != len(run.group()):
            opener = run
            continue
        inner = text[opener.end() : run.start()]
        out.append(_plain(text[at : opener.start()]))
        if len(run.group()) > 1:
            out.append(code_span(nodes.unescape(inner)))
        else:
            out.append(_plain(_TARGET.sub("", inner) or inner))
        at = run.end()
        while at < len(text) and at - run.end() < 2 and text[at] == "_":
            at += 1
        opener = None
    out.append(_plain(text[at:]))
    return "".join(out)


def _plain(text: str) -> str:
    return escape(nodes.unescape(text))


def _unknown_directive(message: nodes.system_message) -> str | None:
    """The argument and content of the directive docutils reports it does not know in `message`
    (which holds the directive as written), as reStructuredText: its options left out. None for
    any other report (a directive refused, such as `raw` or `include`, keeps its content out)."""
    if len(message.children) != 2 or not message.children[0].astext().startswith(_UNKNOWN_DIRECTIVE):
        return None
    block = message.children[1]
    if not isinstance(block, nodes.literal_block):
        return None
    first, *lines = block.astext().split("\n")
    argument = [first.partition("::")[2]]
    at = 0
    while at < len(lines) and lines[at].strip() and not lines[at].lstrip().startswith(":"):
        argument.append(lines[at])
        at += 1
    while at < len(lines) and lines[at].strip():  # its options
        at += 1
    content = textwrap.dedent("\n".join(lines[at:]))
    return f"{' '.join(' '.join(argument).split())}\n\n{content}"
