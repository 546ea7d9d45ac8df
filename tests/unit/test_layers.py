"""Calls go one way: cli -> client | serve -> main -> http, mcp_server, rest -> runtime, operations
-> domain <- stores, auth, engines, knowledge, with the ground floor (urls, blob_urls,
private_files, devkey, errors) beneath them all. A rule holds through every chain of imports, not
only the direct ones: `domain` reaching Starlette through `errors` breaks it as surely as importing
it. And no module reaches itself again through its imports: no circle, lazy imports included."""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

WEB = ("fastapi", "starlette", "uvicorn", "httptools")
SDK = ("mcp", "mcp_types")
AZURE = ("azure", "openai", "msal", "msal_extensions")
SURFACES = ("app.http", "app.mcp_server", "app.rest", "app.main", "app.serve", "app.cli")
SERVER = (
    *SURFACES,
    "app.lifespan",
    "app.runtime",
    "app.operations",
    "app.stores",
    "app.auth",
    "app.engines",
    "app.knowledge",
)
ADAPTERS = ("app.stores", "app.auth", "app.engines", "app.knowledge")
#: Modules every room may use, which use none of the rooms.
GROUND = ("app.urls", "app.blob_urls", "app.private_files", "app.devkey")
#: What nothing else may import, so no rule of their own: the command line, the app it serves
#: (`create_app`) and the composition root that opens its parts.
TOP = {"app.cli", "app.main", "app.lifespan"}


def module_of(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def path_of(module: str) -> Path | None:
    base = APP.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def direct_imports(module: str) -> frozenset[str]:
    """Every module `module` names in an import (at any depth, lazily or not)."""
    path = path_of(module)
    if path is None:
        return frozenset()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from app.stores import sqlite` imports the module app.stores.sqlite.
            found.update(
                f"{node.module}.{alias.name}"
                for alias in node.names
                if path_of(f"{node.module}.{alias.name}") is not None
            )
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return frozenset(found)


def reached(module: str) -> dict[str, list[str]]:
    """Each module reachable from `module`, with one chain of imports that reaches it."""
    chains: dict[str, list[str]] = {module: [module]}
    todo = [module]
    while todo:
        current = todo.pop()
        for name in sorted(direct_imports(current)):
            if name in chains:
                continue
            chains[name] = [*chains[current], name]
            if name.startswith("app.") or name == "app":
                todo.append(name)
    return chains


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def modules(room: str) -> list[str]:
    base = APP.parent.joinpath(*room.split("."))
    if base.is_dir():
        return sorted(module_of(p) for p in base.rglob("*.py"))
    return [room]


def offending(room: str, forbidden: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for module in modules(room):
        for name, chain in reached(module).items():
            if within(name, forbidden) and not within(name, (room,)):
                found[module] = " -> ".join(chain)
                break
    return found


RULES = [
    # The ground floor: small modules of plain Python any room may import; they import each other
    # at most, and nothing of the rooms above.
    *(
        (
            module,
            (
                *SERVER,
                "app.domain",
                "app.client",
                "app.telemetry",
                "app.settings",
                "app.errors",
                *WEB,
                *SDK,
                *AZURE,
            ),
        )
        for module in GROUND
    ),
    # The product's rules: no web framework, protocol or cloud library, through any chain.
    ("app.domain", (*SERVER, "app.client", "app.telemetry", *WEB, *SDK, *AZURE, "httpx")),
    ("app.errors", (*SERVER, "app.domain", "app.client", "app.telemetry", *WEB, *SDK, *AZURE)),
    # Every room imports its part of the settings; the settings import none of the rooms.
    ("app.settings", (*SERVER, "app.domain", "app.client", "app.telemetry", *WEB, *SDK, *AZURE, "httpx")),
    # The catalog of operations knows the domain, not the surfaces that serve it.
    ("app.operations", (*SURFACES, "app.lifespan", "app.runtime", *ADAPTERS, "app.client", *WEB, *SDK)),
    # Adapters implement ports; they never reach up into a surface.
    (
        "app.stores",
        (*SURFACES, "app.lifespan", "app.runtime", "app.operations", "app.auth", "app.client", *SDK),
    ),
    (
        "app.auth",
        (*SURFACES, "app.lifespan", "app.runtime", "app.operations", "app.stores", "app.client", *SDK),
    ),
    (
        "app.engines",
        (
            *SURFACES,
            "app.lifespan",
            "app.runtime",
            "app.operations",
            "app.stores",
            "app.auth",
            "app.client",
            *SDK,
        ),
    ),
    # The knowledge index is read by the engines; it knows nothing of them, nor of the domain.
    (
        "app.knowledge",
        (*SURFACES, "app.lifespan", "app.runtime", "app.operations", "app.engines", "app.domain", *WEB, *SDK),
    ),
    # What the surfaces hold of a running app: the composition root is not in it.
    ("app.runtime", (*SURFACES, "app.lifespan", *ADAPTERS, *WEB, *SDK, *AZURE)),
    # Each surface stands beside the others, never on them, nor on the composition root.
    (
        "app.http",
        ("app.mcp_server", "app.rest", "app.main", "app.serve", "app.cli", "app.client", "app.lifespan"),
    ),
    # (the HTTP plumbing in app.http is beneath both protocol surfaces: they use its guard and
    # problem rendering, it never uses them)
    ("app.mcp_server", ("app.rest", "app.main", "app.serve", "app.cli", "app.client", "app.lifespan")),
    ("app.rest", ("app.mcp_server", "app.main", "app.serve", "app.cli", "app.client", "app.lifespan")),
    ("app.telemetry", ("app.mcp_server", "app.rest", "app.main", "app.serve", "app.cli")),
    ("app.telemetry", ("app.operations", "app.client", *SDK)),
    # uvicorn's configuration and the front door serve the app; the command line starts them.
    ("app.serve", ("app.cli", "app.client")),
    # What `anvil ask / bridge / login / logout` run is a client: none of the server is in it.
    ("app.client", (*SERVER, "app.domain", "app.telemetry", *WEB)),
]


@pytest.mark.parametrize(
    ("room", "forbidden"), RULES, ids=[f"{room}-{n}" for n, (room, _) in enumerate(RULES)]
)
def test_a_room_reaches_nothing_it_must_not(room: str, forbidden: tuple[str, ...]) -> None:
    assert offending(room, forbidden) == {}


def test_every_room_of_the_tree_is_covered() -> None:
    rooms = {f"app.{p.name}" for p in APP.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    loose = {f"app.{p.stem}" for p in APP.glob("*.py") if p.stem != "__init__"}
    assert rooms | loose <= {room for room, _ in RULES} | TOP


def circles(names: list[str]) -> list[list[str]]:
    """The strongly connected groups of more than one module among `names`' imports (Tarjan)."""
    graph = {name: sorted(n for n in direct_imports(name) if n in names) for name in names}
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(name: str) -> None:
        order[name] = low[name] = len(order)
        stack.append(name)
        for other in graph[name]:
            if other not in order:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], order[other])
        if low[name] == order[name]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == name:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for name in names:
        if name not in order:
            visit(name)
    return found


def test_no_module_reaches_itself_through_its_imports() -> None:
    everything = sorted(module_of(p) for p in APP.rglob("*.py"))
    assert circles(everything) == []


def test_the_circle_check_finds_a_lazy_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from app.b import f\n")
    (package / "b.py").write_text("def f():\n    from app.a import g\n")
    (package / "c.py").write_text("from app.a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "APP", package)
    direct_imports.cache_clear()
    try:
        assert circles(["app.a", "app.b", "app.c"]) == [["app.a", "app.b"]]
    finally:
        direct_imports.cache_clear()


def test_the_check_follows_lazy_imports_through_other_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "app"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "a.py").write_text("def f():\n    from app.inner import b\n")
    (package / "inner" / "b.py").write_text("import starlette\n")
    monkeypatch.setattr(sys.modules[__name__], "APP", package)
    direct_imports.cache_clear()
    try:
        assert reached("app.inner.a")["starlette"] == ["app.inner.a", "app.inner.b", "starlette"]
    finally:
        direct_imports.cache_clear()
