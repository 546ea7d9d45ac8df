"""Calls go one way: surfaces (app.api) -> domain -> ports -> adapters, and the domain knows
nothing of HTTP, MCP or storage."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports (at any depth, lazily or not)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def modules(folder: str) -> list[Path]:
    root = APP / folder
    return sorted(root.rglob("*.py")) if root.is_dir() else [APP / f"{folder}.py"]


def offending(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in paths:
        bad = sorted(m for m in imports_of(path) if m.startswith(forbidden))
        if bad:
            found[str(path.relative_to(APP.parent))] = bad
    return found


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        # The rules of the product: no web framework, no protocol, no adapter.
        ("domain", ("app.api", "app.adapters", "app.main", "fastapi", "starlette", "mcp", "azure")),
        ("ports", ("app.api", "app.adapters", "app.main", "fastapi", "starlette", "mcp")),
        # Adapters implement ports; they never reach up into a surface.
        ("adapters", ("app.api", "app.main", "fastapi", "mcp")),
        ("errors", ("app.api", "app.adapters", "app.domain", "app.main")),
    ],
)
def test_a_layer_imports_nothing_above_it(layer: str, forbidden: tuple[str, ...]) -> None:
    assert offending(modules(layer), forbidden) == {}


def test_sign_in_does_not_depend_on_the_other_surfaces() -> None:
    assert offending([APP / "api" / "signin.py"], ("app.api", "app.adapters", "mcp")) == {}


def test_the_check_sees_lazy_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from app.api.rest import build_router\n")
    assert imports_of(module) == {"app.api.rest"}
