"""The Terraform configuration in terraform/, parsed once with python-hcl2, for the deploy tests.

`terraform validate` needs the providers, which need a registry; these helpers need neither. They
give the tests the blocks as python-hcl2 shapes them (blocks are lists of dicts, expressions are
`${...}` strings), the references every expression makes, and the policy templates rendered the
way Terraform's `templatefile()` renders them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import hcl2

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"


def parse(text: str) -> dict[str, Any]:
    """One .tf text: bare strings, blocks as lists of dicts, no comments."""
    options = hcl2.SerializationOptions(
        with_comments=False, explicit_blocks=False, preserve_heredocs=False, strip_string_quotes=True
    )
    return dict(hcl2.loads(text, serialization_options=options))


@cache
def configuration() -> dict[str, list[dict[str, Any]]]:
    """Every top-level block kind (resource, data, locals, ...) across all the .tf files."""
    merged: dict[str, list[dict[str, Any]]] = {}
    files = sorted(TERRAFORM.glob("*.tf"))
    assert files, f"no .tf files in {TERRAFORM}"
    for path in files:
        for kind, found in parse(path.read_text(encoding="utf-8")).items():
            merged.setdefault(kind, []).extend(found)
    return merged


def blocks(kind: str, type_: str, config: Mapping[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Resources (or data sources) of one type, by name."""
    found: dict[str, Any] = {}
    for block in (config or configuration()).get(kind, []):
        found.update(block.get(type_, {}))
    return found


def resource(type_: str, name: str | None = None) -> dict[str, Any]:
    """The resource of this type with this name, or the only one of its type."""
    found = blocks("resource", type_)
    if name is not None:
        assert name in found, f"no {type_}.{name}; there are {sorted(found)}"
        return dict(found[name])
    assert len(found) == 1, f"expected one {type_}, found {sorted(found)}"
    return dict(next(iter(found.values())))


def declared(kind: str, config: Mapping[str, list[dict[str, Any]]] | None = None) -> set[str]:
    """Names of the variables, outputs, locals or modules declared."""
    return {name for block in (config or configuration()).get(kind, []) for name in block}


def locals_() -> dict[str, Any]:
    return {key: value for block in configuration().get("locals", []) for key, value in block.items()}


def one(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A nested block that appears once."""
    (block,) = body[name]
    assert isinstance(block, dict)
    return block


def dynamic(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The `dynamic "<name>"` block of a body."""
    found = [block[name] for block in body.get("dynamic", []) if name in block]
    assert len(found) == 1, f"expected one dynamic {name!r} block"
    return dict(found[0])


def walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in nested dicts and lists."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def strings(value: Any) -> Iterator[str]:
    """Every string in a parsed value, keys included (a map key may be an expression)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


# `${...}` with nested braces (object constructors, for expressions) inside.
INTERPOLATION = re.compile(r"\$\{((?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*)\}")
# A string literal inside an expression: its text is not a reference.
QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
REFERENCE = re.compile(
    r"(?<![\w.])(?:(var|local|module)\.(\w+)|data\.(\w+)\.(\w+)|((?:azurerm|azuread|random)_\w+)\.(\w+))"
    r"(?:\[[^\]]*\])?(?:\.(\w+))?"
)


def expressions(value: Any) -> Iterator[str]:
    """The code inside every `${...}` of a parsed value, string literals blanked out."""
    for text in strings(value):
        for match in INTERPOLATION.finditer(text):
            code = match.group(1)
            # Template strings nested in the expression carry their own interpolations.
            yield from expressions(re.findall(QUOTED, code))
            yield QUOTED.sub('""', code)


def references(value: Any) -> set[tuple[str, str, str, str | None]]:
    """(kind, type, name, first attribute) of every reference in a parsed value.

    kind is var, local, module, data or resource; type is empty for var, local and module.
    """
    found: set[tuple[str, str, str, str | None]] = set()
    for code in expressions(value):
        for match in REFERENCE.finditer(code):
            kind, name, data_type, data_name, res_type, res_name, attribute = match.groups()
            if kind:
                found.add((kind, "", name, None))
            elif data_type:
                found.add(("data", data_type, data_name, attribute))
            else:
                found.add(("resource", res_type, res_name, attribute))
    return found


TEMPLATE_DIRECTIVE = re.compile(r"%\{~?\s*(.*?)\s*~?\}")
TEMPLATE_FOR = re.compile(r"%\{\s*for (\w+) in (\w+)\s*~\}\n(.*?)%\{\s*endfor\s*~\}\n", re.S)
TEMPLATE_VALUE = re.compile(r"\$\{(\w+)\}")


def render_template(text: str, values: Mapping[str, Any]) -> str:
    """What `templatefile()` makes of a template that uses `${name}` and `%{ for x in list ~}`.

    Anything else (another directive, an expression, a name not given) raises, so a template
    that grows beyond this subset fails the tests instead of being rendered wrongly.
    """

    def value(name: str, scope: Mapping[str, Any]) -> str:
        if name not in scope:
            raise KeyError(f"template refers to {name!r}, which is not passed to templatefile()")
        item = scope[name]
        if isinstance(item, bool | list | dict):
            raise TypeError(f"{name!r} is not a string or number")
        return str(item)

    def expand(match: re.Match[str]) -> str:
        variable, collection, body = match.groups()
        items = values.get(collection)
        if not isinstance(items, list):
            raise TypeError(f"{collection!r} must be a list to loop over")
        rendered = []
        for item in items:
            scope = {**values, variable: item}
            rendered.append(TEMPLATE_VALUE.sub(lambda m, scope=scope: value(m.group(1), scope), body))
        return "".join(rendered)

    looped = TEMPLATE_FOR.sub(expand, text)
    leftover = TEMPLATE_DIRECTIVE.search(looped)
    if leftover:
        raise ValueError(f"unsupported template directive: {leftover.group(0)}")
    if re.search(r"\$\{(?!\w+\})", looped):
        raise ValueError("only plain ${name} interpolations are supported")
    return TEMPLATE_VALUE.sub(lambda m: value(m.group(1), values), looped)


def templatefile_call(expression: str) -> tuple[str, dict[str, str]]:
    """The template path and the argument expressions of a `${templatefile(path, {...})}` value."""
    match = re.fullmatch(r'\$\{templatefile\("\$\{path\.module\}/([^"]+)", \{(.*)\}\)\}', expression, re.S)
    assert match, f"not a templatefile() call on a file beside the configuration: {expression}"
    path, body = match.groups()
    arguments = {}
    for line in re.split(r",\s*(?=\w+\s*=)", body.strip()):
        key, _, expr = line.partition("=")
        arguments[key.strip()] = expr.strip().rstrip(",")
    return path, arguments
