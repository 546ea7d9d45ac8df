"""Sphinx's directives, which docutils does not know, read for what a Sphinx page shows of them.

docutils reports a directive it does not know as an error and keeps none of its content, so a
Sphinx page would lose every `versionadded` note, every described function and everything under
a `tab`. `register` tells docutils (through its public registry, once) of Sphinx's directives and
those of its common extensions, each read as plain docutils nodes:

- version notes (`versionadded`, `versionchanged`, `deprecated`, `versionremoved`): a line as
  Sphinx writes it (`Added in version 2.0.`), then their content;
- `seealso` and `todo`: an admonition titled `See also` or `Todo`;
- object descriptions (`function`, `method`, `attribute`, `data`, `envvar`, `option`, ... with or
  without a domain, `py:function`): each signature as a code line, then the description;
- autodoc's directives (`autoclass`, ...): the text written under them (the docstrings they pull
  in are in the code, not the page);
- layout (`only`, `hlist`, `glossary`, tabs, cards, grids, dropdowns): their content, after a
  bold title line (a label, as a generic admonition's title is) for those that have one;
- `code-block`, `sourcecode` and `code-tab` take Sphinx's options (`caption`,
  `emphasize-lines`, ...) and give the caption as a line before the code; `doctest`, `testcode`,
  `testoutput` and `productionlist` are code;
- what holds nothing to read, or what must not be read (`toctree`, `index`, `highlight`,
  `module`, `literalinclude`, diagrams): nothing.

Directives come from nowhere else: no Sphinx extension is imported, no file is read.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import Directive, directives
from docutils.parsers.rst.directives.body import CodeBlock


class _AnyOptions(dict[str, Callable[[str], Any]]):
    """An option specification that takes every option, its value as written (Sphinx's
    directives have many, none of which changes the text)."""

    def __getitem__(self, key: str) -> Callable[[str], Any]:
        return directives.unchanged

    def __contains__(self, key: object) -> bool:
        return True

    def __bool__(self) -> bool:
        return True


class _Read(Directive):
    """A directive read for its content, after a line made of its argument by `head`."""

    optional_arguments = 1
    final_argument_whitespace = True
    option_spec = _AnyOptions()
    has_content = True

    def head(self, argument: str) -> list[nodes.Node]:
        """What comes before the content: the argument, as a paragraph of inline markup."""
        return self.line(argument)

    def line(self, text: str) -> list[nodes.Node]:
        if not text.strip():
            return []
        inline, messages = self.state.inline_text(" ".join(text.split()), self.lineno)
        return [nodes.paragraph("", "", *inline), *messages]

    def run(self) -> list[nodes.Node]:
        node = nodes.container()
        node.extend(self.head(self.arguments[0] if self.arguments else ""))
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


#: The class of a paragraph that is a title labelling what follows (a tab's, a card's), which
#: the reader writes as a bold line.
LABEL = "anvil-label"


class _Headed(_Read):
    """Layout titled by its argument (a tab, a card, a dropdown): the title as a label."""

    def head(self, argument: str) -> list[nodes.Node]:
        found = self.line(argument)
        for node in found[:1]:
            if isinstance(node, nodes.Element):
                node["classes"].append(LABEL)
        return found


class _Content(_Read):
    """Layout whose argument is no text (`only`'s condition, a grid's column counts)."""

    def head(self, argument: str) -> list[nodes.Node]:
        return []


class _Version(_Read):
    """`versionadded:: 2.0 What changed`: `Added in version 2.0.`, then what changed."""

    required_arguments = 1
    optional_arguments = 1
    said: ClassVar[dict[str, str]] = {
        "versionadded": "Added in version {}.",
        "versionchanged": "Changed in version {}.",
        "deprecated": "Deprecated since version {}.",
        "versionremoved": "Removed in version {}.",
    }

    def run(self) -> list[nodes.Node]:
        node = nodes.container()
        node += nodes.paragraph("", self.said[self.name].format(self.arguments[0]))
        node.extend(self.line(self.arguments[1] if len(self.arguments) > 1 else ""))
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


class _Titled(_Read):
    """An admonition of Sphinx's (`seealso`, `todo`): titled by its kind; an argument is text."""

    titles: ClassVar[dict[str, str]] = {"seealso": "See also", "todo": "Todo"}

    def run(self) -> list[nodes.Node]:
        node = nodes.admonition()
        node += nodes.title("", self.titles[self.name])
        node.extend(self.head(self.arguments[0] if self.arguments else ""))
        if self.content:
            self.state.nested_parse(self.content, self.content_offset, node)
        return [node]


class _Description(_Read):
    """An object's description: each signature (one a line) as code, then the text."""

    def head(self, argument: str) -> list[nodes.Node]:
        lines = [line.strip().removesuffix("\\").strip() for line in argument.split("\n")]
        return [nodes.paragraph("", "", nodes.literal(line, line)) for line in lines if line]


class _Autodoc(_Content):
    """An autodoc directive: the text written under it (its docstrings are in the code)."""


class _Literal(_Read):
    """A directive whose content is code as written (`doctest`, `testcode`, `productionlist`)."""

    def run(self) -> list[nodes.Node]:
        code = "\n".join(self.content)
        return [nodes.literal_block(code, code)] if code.strip() else []


class _Nothing(Directive):
    """A directive with nothing to read, or nothing that may be read (a file, a diagram)."""

    optional_arguments = 1
    final_argument_whitespace = True
    option_spec = _AnyOptions()
    has_content = True

    def run(self) -> list[nodes.Node]:
        return []


_SPHINX_CODE_OPTIONS = ("emphasize-lines", "linenos", "lineno-start", "dedent", "force")


class _Code(CodeBlock):
    """docutils' `code` with Sphinx's options taken; a `caption` is a line before the code."""

    option_spec: ClassVar[dict[str, Callable[[str], str | list[str]]]] = {
        **CodeBlock.option_spec,
        "caption": directives.unchanged,
        **{name: directives.unchanged for name in _SPHINX_CODE_OPTIONS},
    }

    def run(self) -> list[nodes.Node]:
        caption = str(self.options.pop("caption", "") or "")
        for name in _SPHINX_CODE_OPTIONS:
            self.options.pop(name, None)
        code: list[nodes.Node] = list(super().run())  # type: ignore[no-untyped-call]
        if caption.strip():
            code.insert(0, nodes.paragraph("", " ".join(caption.split())))
        return code


_DOMAINS = ("py", "js", "c", "cpp", "rst", "std", "http", "mat", "rb", "php", "go", "dotnet", "net")
_DESCRIBED = (
    "function",
    "method",
    "classmethod",
    "staticmethod",
    "attribute",
    "property",
    "data",
    "exception",
    "decorator",
    "decoratormethod",
    "member",
    "var",
    "type",
    "macro",
    "struct",
    "union",
    "enum",
    "enumerator",
    "enum-class",
    "enum-struct",
    "alias",
    "concept",
    "namespace",
    "namespace-push",
    "namespace-pop",
    "envvar",
    "option",
    "cmdoption",
    "describe",
    "object",
    "confval",
    "directive",
    "role",
    "directive:option",
)
_HTTP = (
    "get",
    "post",
    "put",
    "patch",
    "delete",
    "head",
    "options",
)
_AUTODOC = (
    "automodule",
    "autoclass",
    "autoexception",
    "autofunction",
    "automethod",
    "autoattribute",
    "autodata",
    "autoproperty",
    "autodecorator",
    "autonewtypedata",
    "autoclassmethod",
    "autostaticmethod",
    "autotypeddict",
    "autopydantic_model",
    "autopydantic_settings",
    "click",
    "autoprogram",
    "argparse",
)
_CONTENT = (
    "only",
    "ifconfig",
    "hlist",
    "glossary",
    "tabs",
    "tab-set",
    "grid",
)
_HEADED = (
    "tab",
    "group-tab",
    "tab-item",
    "dropdown",
    "card",
    "grid-item",
    "grid-item-card",
    "centered",
)
_LITERAL = (
    "doctest",
    "testcode",
    "testoutput",
    "productionlist",
)
_NOTHING = (
    "toctree",
    "index",
    "highlight",
    "module",
    "currentmodule",
    "sectionauthor",
    "moduleauthor",
    "codeauthor",
    "tabularcolumns",
    "default-domain",
    "literalinclude",
    "autosummary",
    "todolist",
    "program",
    "graphviz",
    "graph",
    "digraph",
    "inheritance-diagram",
    "plantuml",
    "uml",
    "mermaid",
    "testsetup",
    "testcleanup",
)


@cache
def register() -> None:
    """Tell docutils of Sphinx's directives (once a process): see the module."""
    for name in _DESCRIBED:
        directives.register_directive(name, _Description)
        for domain in _DOMAINS:
            directives.register_directive(f"{domain}:{name}", _Description)
    for name in _HTTP:
        directives.register_directive(f"http:{name}", _Description)
    for domain in _DOMAINS:
        directives.register_directive(f"{domain}:module", _Nothing)
        directives.register_directive(f"{domain}:currentmodule", _Nothing)
        directives.register_directive(f"{domain}:class", _Description)
    for name in _AUTODOC:
        directives.register_directive(name, _Autodoc)
    for name in _CONTENT:
        directives.register_directive(name, _Content)
    for name in _HEADED:
        directives.register_directive(name, _Headed)
    for name in _NOTHING:
        directives.register_directive(name, _Nothing)
    for name in _Version.said:
        directives.register_directive(name, _Version)
    for name in _Titled.titles:
        directives.register_directive(name, _Titled)
    for name in ("code-block", "sourcecode", "code-tab"):
        directives.register_directive(name, _Code)
    for name in _LITERAL:
        directives.register_directive(name, _Literal)
