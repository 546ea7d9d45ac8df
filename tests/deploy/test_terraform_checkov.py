"""checkov's policies on terraform/: no finding beyond the accepted ones in checkov-accepted.yml.

checkov pins older versions of libraries Anvil uses, so it lives in a virtual environment of its
own that ./dev.sh creates (.venv-checkov); CHECKOV_BINARY may name another checkov binary.

Starting checkov is most of the cost of a run, so it runs once per test process, over two copies
side by side: terraform/ as it is, and one with a resource weakened, which checkov must report. Each
finding names the file it is in, so the two sets of findings do not mix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from deploy.terraform_config import TERRAFORM
from support.tool_venvs import tool_program

ACCEPTED = Path(__file__).with_name("checkov-accepted.yml")
# After the directory: what docs/deployment.md shows, plus the JSON report the tests read.
CHECKOV_ARGUMENTS = ["--framework", "terraform", "--skip-download", "--quiet", "--compact"]


def checkov_binary() -> Path:
    return tool_program("CHECKOV_BINARY", ".venv-checkov", "checkov")


def run_checkov(directory: Path) -> list[tuple[str, str, str]]:
    """(check id, resource, file relative to `directory`) of every failed check, from checkov's
    JSON report."""
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
        failed += [
            (check["check_id"], check["resource"], check["file_path"])
            for check in one["results"]["failed_checks"]
        ]
    return failed


#: The two trees of the one scan: terraform/ as it is, and a copy with the registry's admin user on.
AS_IS, WEAKENED = "terraform", "weakened"


@cache
def scanned() -> dict[str, frozenset[tuple[str, str]]]:
    """(check id, resource) of every failed check, for each of the two trees."""
    with tempfile.TemporaryDirectory(prefix="checkov-") as folder:
        root = Path(folder)
        # terraform's own cache (.terraform) is no source, and checkov skips it anyway.
        shutil.copytree(TERRAFORM, root / AS_IS, ignore=shutil.ignore_patterns(".terraform"))
        weakened = root / WEAKENED
        shutil.copytree(TERRAFORM, weakened, ignore=shutil.ignore_patterns("openapi.json", ".terraform"))
        registry = weakened / "registry.tf"
        source = registry.read_text(encoding="utf-8")
        assert "admin_enabled       = false" in source, "registry.tf no longer turns the admin user off"
        registry.write_text(
            source.replace("admin_enabled       = false", "admin_enabled       = true"), encoding="utf-8"
        )
        found: dict[str, set[tuple[str, str]]] = {AS_IS: set(), WEAKENED: set()}
        for check_id, resource, file_path in run_checkov(root):
            tree = Path(file_path).parts[1]
            assert tree in found, f"checkov reported a file outside both trees: {file_path}"
            found[tree].add((check_id, resource))
    return {tree: frozenset(findings) for tree, findings in found.items()}


def findings() -> frozenset[tuple[str, str]]:
    return scanned()[AS_IS]


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


def test_checkov_reports_a_weakened_resource() -> None:
    assert ("CKV_AZURE_137", "azurerm_container_registry.anvil") in scanned()[WEAKENED]
    assert ("CKV_AZURE_137", "azurerm_container_registry.anvil") not in findings()
