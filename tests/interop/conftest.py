"""The Node tools that the interoperability tests drive (servers come from tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
