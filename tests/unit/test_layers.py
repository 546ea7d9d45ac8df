"""Calls go one way: cli -> client | serve -> main -> http, mcp_server, rest -> operations ->
domain <- stores, auth, engines. A rule holds through every chain of imports, not only the direct
ones: `domain` reaching Starlette through `errors` breaks it as surely as importing it."""

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
    "app.operations",
    "app.stores",
    "app.auth",
    "app.adapters",
    "app.knowledge",
)
ADAPTERS = ("app.stores", "app.auth", "app.adapters", "app.knowledge")


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
    # The product's rules: no web framework, protocol or cloud library, through any chain.
    ("app.domain", (*SERVER, "app.client", "app.telemetry", *WEB, *SDK, *AZURE, "httpx")),
    ("app.errors", (*SERVER, "app.domain", "app.client", "app.telemetry", *WEB, *SDK, *AZURE)),
    # Every room imports its part of the settings; the settings import none of the rooms.
    ("app.settings", (*SERVER, "app.domain", "app.client", "app.telemetry", *WEB, *SDK, *AZURE, "httpx")),
    # The catalog of operations knows the domain, not the surfaces that serve it.
    ("app.operations", (*SURFACES, "app.lifespan", *ADAPTERS, "app.client", *WEB, *SDK)),
    # Adapters implement ports; they never reach up into a surface.
    ("app.stores", (*SURFACES, "app.lifespan", "app.operations", "app.auth", "app.client", *SDK)),
    ("app.auth", (*SURFACES, "app.lifespan", "app.operations", "app.stores", "app.client", *SDK)),
    ("app.adapters", (*SURFACES, "app.lifespan", "app.operations", "app.stores", "app.client", *SDK)),
    # The knowledge index is read by the engines; it knows nothing of them, nor of the domain.
    (
        "app.knowledge",
        (*SURFACES, "app.lifespan", "app.operations", "app.adapters", "app.domain", *WEB, *SDK),
    ),
    # Each surface stands beside the others, never on them.
    ("app.http", ("app.mcp_server", "app.rest", "app.main", "app.serve", "app.cli", "app.client")),
    # (the HTTP plumbing in app.http is beneath both protocol surfaces: they use its guard and
    # problem rendering, it never uses them)
    ("app.mcp_server", ("app.rest", "app.main", "app.serve", "app.cli", "app.client")),
    ("app.rest", ("app.mcp_server", "app.main", "app.serve", "app.cli", "app.client")),
    ("app.telemetry", ("app.mcp_server", "app.rest", "app.main", "app.serve", "app.cli")),
    ("app.telemetry", ("app.operations", "app.client", *SDK)),
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
    assert rooms <= {room for room, _ in RULES}


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
