"""The markdown-it parsers a corpus is read with: CommonMark, and the extensions its sites use.

CommonMark with raw HTML, GFM tables and strikethrough, then mdit-py-plugins for YAML front
matter, footnotes, MkDocs admonitions (`!!! note "Title"`, `??? tip`, `???+ tip`; the content is
indented four spaces, as in MkDocs) and Docusaurus admonitions (`:::tip Title` up to `:::`).
Two block rules of MkDocs sites have no plugin and are written here:

- a mkdocstrings directive (`::: package.module.Class`, a space after the colons) and the
  options indented under it are dropped: they ask the site to render API docs, and are not prose;
- a pymdownx tab (`=== "Title"`, its content indented four spaces) is a block titled `Title`.

An MDX document has no indented code (MDX turns it off, so indented prose inside a component is
prose), so its parser does without it.

markdown-it stops reading a container nested deeper than its `maxNesting` (20 levels of tokens:
about nine lists in lists, or nineteen quotes in quotes) and drops the rest of it without a word.
Here the first block rule (`_watch`) reads a container two levels short of that (8 lists in
lists and 17 quotes in quotes are read as they nest) as one paragraph of text to its end instead,
and notes it in the parse's `env[TOO_DEEP]`; it also tells `env[HEARD]`, if given, how far the
parse has come ("blocks": characters of the text; "inlines": inline tokens parsed), so that a
large document can show its progress.
"""

from __future__ import annotations

import re
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.ruler import RuleOptionsType
from markdown_it.rules_block import StateBlock
from markdown_it.rules_core import StateCore
from mdit_py_plugins.admon import admon_plugin
from mdit_py_plugins.container import container_plugin
from mdit_py_plugins.footnote import footnote_plugin
from mdit_py_plugins.front_matter import front_matter_plugin

#: The token type of a Docusaurus admonition (`:::tip` ... `:::`), `_open` and `_close` added.
CONTAINER = "container_docusaurus"
#: The token type of a pymdownx tab, `_open` and `_close` added; its title is in `meta["title"]`.
TAB = "tab"
#: The `env` key set when blocks nested too deep were read as text.
TOO_DEEP = "anvil_too_deep"
#: The `env` key of what hears (phase, done, of) as a parse goes ("blocks", "inlines").
HEARD = "anvil_heard"
#: How many levels of tokens below markdown-it's `maxNesting` a container is still read as one:
#: a list item's paragraph needs two (the paragraph and its inline text).
_ROOM = 2

_DIRECTIVE = re.compile(r":::[ \t]+\S+[ \t]*$")
_TAB = re.compile(r'===[+!]?[ \t]+"([^"]*)"[ \t]*$')
# Block rules that may interrupt a paragraph, a reference, a quote or a list, as a fence may.
_INTERRUPTS: RuleOptionsType = {"alt": ["paragraph", "reference", "blockquote", "list"]}


@cache
def parser(*, mdx: bool = False) -> MarkdownIt:
    """The parser of a `.md` document, or of an `.mdx` one once `strip_mdx` has run on it."""
    return _build(mdx=mdx)


@cache
def outline_parser(*, mdx: bool = False) -> MarkdownIt:
    """`parser` without the inline pass (about half the work): blocks only, to find headings."""
    return _build(mdx=mdx).disable("inline")


def _build(*, mdx: bool) -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
    md.use(front_matter_plugin).use(footnote_plugin).use(admon_plugin)
    # A Docusaurus admonition names its kind right after the colons; a mkdocstrings directive
    # has a space there and is `_directive`'s.
    md.use(container_plugin, name="docusaurus", validate=lambda params, *_: params[:1].isalpha())
    md.block.ruler.before(CONTAINER, "mkdocstrings", _directive, _INTERRUPTS)
    md.block.ruler.before("fence", TAB, _tab, _INTERRUPTS)
    if mdx:
        md.disable("code")
    md.block.ruler.before(md.block.ruler.get_all_rules()[0], "anvil_watch", _watch)
    md.core.ruler.at("inline", _inlines)
    # Escapes and entities stay tokens of their own (`text_special`), so that `\\<b>` and
    # `&lt;b&gt;` can be told from a tag-like run of text that is not valid HTML.
    return md.disable("text_join")


@cache
def front_matter_parser() -> MarkdownIt:
    """A parser that finds front matter and nothing else of note."""
    md = MarkdownIt("zero").use(front_matter_plugin)
    md.disable(["inline", "text_join"])
    return md


def _watch(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """The progress of the parse, told at each top-level block; and a container nested too deep
    for the parser, read to its end as one paragraph of text (see the module)."""
    if state.level == 0:
        heard = state.env.get(HEARD)
        if heard is not None:
            heard("blocks", state.bMarks[start], len(state.src))
        return False
    if silent or state.level < state.md.options.maxNesting - _ROOM:
        return False
    token = state.push("paragraph_open", "p", 1)
    token.map = [start, end]
    token = state.push("inline", "", 0)
    token.content = state.getLines(start, end, state.blkIndent, False).strip()
    token.map = [start, end]
    token.children = []
    state.push("paragraph_close", "p", -1)
    state.line = end
    state.env[TOO_DEEP] = True
    return True


def _inlines(state: StateCore) -> None:
    """markdown-it's own inline pass (each inline token parsed into its children), telling
    `env[HEARD]` how far it is."""
    heard = state.env.get(HEARD)
    for number, token in enumerate(state.tokens):
        if token.type == "inline":
            if token.children is None:
                token.children = []
            state.md.inline.parse(token.content, state.md, state.env, token.children)
            if heard is not None and number % 256 == 0:
                heard("inlines", number, len(state.tokens))


def _line(state: StateBlock, line: int) -> str:
    return state.src[state.bMarks[line] + state.tShift[line] : state.eMarks[line]]


def _directive(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """A mkdocstrings directive line and the lines indented under it, dropped."""
    if state.is_code_block(start) or not _DIRECTIVE.match(_line(state, start)):
        return False
    if silent:
        return True
    indent = state.sCount[start]
    line = start + 1
    while line < end and (state.isEmpty(line) or state.sCount[line] > indent):
        line += 1
    token = state.push("mkdocstrings", "", 0)
    token.hidden = True
    token.map = [start, line]
    state.line = line
    return True


def _tab(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """A pymdownx tab: its title line, then its content, indented four spaces more."""
    if state.is_code_block(start):
        return False
    match = _TAB.match(_line(state, start))
    if match is None:
        return False
    if silent:
        return True
    indent = state.sCount[start] + 4
    line = start + 1
    while line < end and (state.isEmpty(line) or state.sCount[line] >= indent):
        line += 1
    old_indent, old_max = state.blkIndent, state.lineMax
    token = state.push(f"{TAB}_open", "div", 1)
    token.block = True
    token.meta = {"title": match.group(1)}
    token.map = [start, line]
    state.blkIndent, state.lineMax = indent, line
    state.md.block.tokenize(state, start + 1, line)
    state.blkIndent, state.lineMax = old_indent, old_max
    token = state.push(f"{TAB}_close", "div", -1)
    token.block = True
    state.line = line
    return True
