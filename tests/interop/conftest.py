"""Real `anvil serve` processes and the Node tools that the interoperability tests drive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.anvil_server import AnvilServer, run_anvil

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO_ROOT / "node_modules"


@pytest.fixture(scope="session")
def node() -> Path:
    """Node 22 from the repository's `npm ci`; fails with the fix when it is missing."""
    binary = NODE_MODULES / ".bin" / "node"
    packages = [NODE_MODULES / "@modelcontextprotocol" / name for name in ("conformance", "sdk")]
    missing = [str(path) for path in [binary, *packages] if not path.exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `npm ci` at the repository root (./dev.sh test does)")
    return binary


@pytest.fixture(scope="session")
def signed_in_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    """Dev sign-in, SQLite store, echo engine (answers name the previous question)."""
    with run_anvil(tmp_path_factory.mktemp("interop-dev"), {"ANVIL_ANSWER_ENGINE": "echo"}) as server:
        yield server


@pytest.fixture(scope="session")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    """Sign-in off, memory store, echo engine: the setup the conformance suite needs."""
    env = {"ANVIL_AUTH_MODE": "none", "ANVIL_ANSWER_ENGINE": "echo", "ANVIL_STORE": "memory"}
    with run_anvil(tmp_path_factory.mktemp("interop-open"), env) as server:
        yield server
