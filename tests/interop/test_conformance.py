"""The official MCP conformance suite against a real `anvil serve`, in both protocol eras.

`@modelcontextprotocol/conformance` acts as the client. It cannot send a bearer token, so it runs
against a server with sign-in off. `--suite all --spec-version V` runs every server scenario that
applies to revision V, pending ones included. The suite judges the run against
`conformance-expected-failures.yml` itself: it fails on a check that fails without being listed,
and on a listed check that now passes, so the file can only shrink as Anvil improves.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from support.anvil_server import AnvilServer

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = REPO_ROOT / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EXPECTED_FAILURES = Path(__file__).with_name("conformance-expected-failures.yml")
#: One revision takes about two seconds; the bound only stops a hung run.
RUN_TIMEOUT = 90
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failing_checks(results: Path) -> list[str]:
    """`scenario:check-id STATUS message` for every check the suite counts as failed."""
    lines = []
    for path in sorted(results.glob("*/checks.json")):
        scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name)
        for check in json.loads(path.read_text()):
            if check["status"] in ("FAILURE", "WARNING"):
                message = check.get("errorMessage") or check.get("description", "")
                lines.append(f"{scenario}:{check['id']} {check['status']} {message}")
    return lines


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_the_conformance_suite_passes_but_for_listed_failures(
    node: Path, anon_server: AnvilServer, revision: str, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    command = [
        str(node),
        str(CONFORMANCE),
        "server",
        "--url",
        anon_server.mcp_url,
        "--suite",
        "all",
        "--spec-version",
        revision,
        "--expected-failures",
        str(EXPECTED_FAILURES),
        "--output-dir",
        str(results),
    ]
    ran = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    output = ANSI.sub("", ran.stdout)
    verdict = output[output.find("=== SUMMARY ===") :]
    assert ran.returncode == 0 and "Baseline check passed" in output, (
        f"conformance {revision} exited {ran.returncode}\n{verdict or output}\n{ran.stderr}\n"
        "Failing checks:\n" + "\n".join(failing_checks(results))
    )
