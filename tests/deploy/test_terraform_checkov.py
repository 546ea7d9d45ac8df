"""checkov's policies on terraform/: no finding beyond the accepted ones in checkov-accepted.yml.

checkov pins older versions of libraries Anvil uses, so it lives in a virtual environment of its
own that ./dev.sh creates (.venv-checkov); CHECKOV_BINARY may name another checkov binary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy.terraform_config import ROOT, TERRAFORM

ACCEPTED = Path(__file__).with_name("checkov-accepted.yml")
# After the directory: what docs/deployment.md shows, plus the JSON report the tests read.
CHECKOV_ARGUMENTS = ["--framework", "terraform", "--skip-download", "--quiet", "--compact"]


def checkov_binary() -> Path:
    configured = os.environ.get("CHECKOV_BINARY")
    path = Path(configured) if configured else ROOT / ".venv-checkov" / "bin" / "checkov"
    if not path.is_file():
        pytest.skip(f"checkov is not installed at {path}: ./dev.sh test installs it")
    return path


def run_checkov(directory: Path) -> list[tuple[str, str]]:
    """(check id, resource) of every failed check, from checkov's JSON report."""
    completed = subprocess.run(
        [str(checkov_binary()), "-d", str(directory), *CHECKOV_ARGUMENTS, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # 0: nothing failed, 1: something failed; anything else is checkov itself failing.
    assert completed.returncode in (0, 1), completed.stderr[-2000:]
    report: Any = json.loads(completed.stdout) if completed.stdout.strip() else {}
    reports = report if isinstance(report, list) else [report]
    failed = []
    for one in reports:
        if not one:
            continue
        assert one["summary"]["parsing_errors"] == 0, one["results"].get("parsing_errors")
        failed += [(check["check_id"], check["resource"]) for check in one["results"]["failed_checks"]]
    return failed


@cache
def findings() -> tuple[tuple[str, str], ...]:
    return tuple(run_checkov(TERRAFORM))


def accepted() -> dict[tuple[str, str], str]:
    entries = yaml.safe_load(ACCEPTED.read_text(encoding="utf-8"))
    found = {}
    for entry in entries:
        assert set(entry) == {"check", "resource", "reason"}, entry
        assert entry["reason"].strip(), f"{entry['check']} needs a reason"
        assert "\n" not in entry["reason"].strip(), f"{entry['check']}: one line"
        found[(entry["check"], entry["resource"])] = entry["reason"]
    return found


def test_checkov_finds_nothing_new() -> None:
    new = sorted(set(findings()) - set(accepted()))
    assert not new, f"fix these or add them, with a reason, to {ACCEPTED.name}: {new}"


def test_every_accepted_finding_still_occurs() -> None:
    stale = sorted(set(accepted()) - set(findings()))
    assert not stale, f"remove from {ACCEPTED.name}, checkov no longer reports them: {stale}"


def test_no_finding_is_skipped_in_the_terraform_itself() -> None:
    # One list of accepted findings, with reasons: inline skips would hide them from it.
    for path in TERRAFORM.glob("*.tf"):
        assert "checkov:skip" not in path.read_text(encoding="utf-8"), path.name


def test_checkov_reports_a_weakened_resource(tmp_path: Path) -> None:
    copy = tmp_path / "terraform"
    shutil.copytree(TERRAFORM, copy, ignore=shutil.ignore_patterns("openapi.json", ".terraform"))
    registry = copy / "registry.tf"
    registry.write_text(
        registry.read_text(encoding="utf-8").replace(
            "admin_enabled       = false", "admin_enabled       = true"
        ),
        encoding="utf-8",
    )
    assert ("CKV_AZURE_137", "azurerm_container_registry.anvil") in run_checkov(copy)
