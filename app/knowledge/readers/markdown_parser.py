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
"""

from __future__ import annotations

import re
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.ruler import RuleOptionsType
from markdown_it.rules_block import StateBlock
from mdit_py_plugins.admon import admon_plugin
from mdit_py_plugins.container import container_plugin
from mdit_py_plugins.footnote import footnote_plugin
from mdit_py_plugins.front_matter import front_matter_plugin

#: The token type of a Docusaurus admonition (`:::tip` ... `:::`), `_open` and `_close` added.
CONTAINER = "container_docusaurus"
#: The token type of a pymdownx tab, `_open` and `_close` added; its title is in `meta["title"]`.
TAB = "tab"

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
    # Escapes and entities stay tokens of their own (`text_special`), so that `\\<b>` and
    # `&lt;b&gt;` can be told from a tag-like run of text that is not valid HTML.
    return md.disable("text_join")


@cache
def front_matter_parser() -> MarkdownIt:
    """A parser that finds front matter and nothing else of note."""
    md = MarkdownIt("zero").use(front_matter_plugin)
    md.disable(["inline", "text_join"])
    return md


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
