"""`anvil --help` and `anvil --version` answer before anything heavy is imported: building the
parser imports none of the server's libraries (they cost most of a second of start-up)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pydantic", "pydantic_settings", "fastapi", "starlette", "uvicorn", "mcp", "numpy", "httpx")


def test_building_the_parser_imports_nothing_heavy() -> None:
    probe = (
        "import sys\n"
        "from app.cli.main import build_parser\n"
        "build_parser()\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert ran.stdout.strip() == "[]"
