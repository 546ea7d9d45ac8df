"""The tools `./dev.sh test` installs into virtual environments of their own (`ensure_tool_venv`:
checkov, Sphinx), as the tests that run them find them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tool_program(variable: str, venv: str, program: str) -> Path:
    """`program` of the checkout's `venv` (`.venv-checkov`, ...), or the one the environment
    variable `variable` names; the test is skipped when it is not there."""
    configured = os.environ.get(variable)
    path = Path(configured) if configured else ROOT / venv / "bin" / program
    if not path.is_file():
        pytest.skip(f"{program} is not installed at {path}: ./dev.sh test installs it")
    return path
