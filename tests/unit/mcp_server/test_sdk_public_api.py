"""Anvil uses the MCP SDK through its public API only, and depends on a compatible range of it."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
SDK_PACKAGES = ("mcp", "mcp_types")
#: Private attributes of SDK objects that Anvil once reached for; none may come back.
KNOWN_PRIVATE_ATTRIBUTES = ("_lowlevel_server", "_lifespan_state", "_tool_manager", "_session_manager")


def sdk_import_violations(source: str) -> list[str]:
    """Imports of an underscore module or name of the SDK in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in SDK_PACKAGES:
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in SDK_PACKAGES and any(p.startswith("_") for p in parts):
                    found.append(alias.name)
    return found


def test_the_check_finds_private_imports() -> None:
    assert sdk_import_violations("from mcp.server._otel import OpenTelemetryMiddleware") == [
        "mcp.server._otel"
    ]
    assert sdk_import_violations("from mcp.server.runner import _dump_result") == [
        "mcp.server.runner._dump_result"
    ]
    assert sdk_import_violations("import mcp.server._streamable_http_modern") != []
    assert sdk_import_violations("from mcp.server.runner import serve_one") == []
    assert sdk_import_violations("from app._private import x") == []


def test_no_module_of_anvil_imports_a_private_sdk_name() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "app").rglob("*.py"))
        if (found := sdk_import_violations(path.read_text()))
    }
    assert offenders == {}


def test_no_module_of_anvil_reaches_into_sdk_objects() -> None:
    pattern = re.compile(r"\.(" + "|".join(KNOWN_PRIVATE_ATTRIBUTES) + r")\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "app").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_the_sdk_dependency_is_a_compatible_range() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (sdk,) = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == "mcp"]
    specifiers = {(s.operator, s.version) for s in sdk.specifier}
    assert not any(operator in ("==", "===") for operator, _ in specifiers), sdk
    assert ("<", "3") in specifiers and any(op == ">=" for op, _ in specifiers), sdk
