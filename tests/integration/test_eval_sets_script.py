"""`bench/eval_sets.sh`, which fetches undici's docs for `bench/questions/undici.json`, run against
an `npm` stand-in that packs a made-up release: what lands where, that a set already fetched at
its pinned release is kept, and that a release without docs is refused."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "eval_sets.sh"
PINNED = re.search(r"^UNDICI=(\S+)$", SCRIPT.read_text(encoding="utf-8"), re.M)

# Packs `undici-VERSION.tgz` as `npm pack` does, with docs/docs unless NO_DOCS is set, and notes
# each call.
FAKE_NPM = """#!/usr/bin/env bash
set -euo pipefail
echo "$*" >>"$NPM_CALLS"
spec=${@: -1}
version=${spec#undici@}
mkdir -p package/docs/docs/api
if [ -z "${NO_DOCS:-}" ]; then
  printf '# Agent\\n\\nAn agent.\\n' >package/docs/docs/api/Agent.md
  printf '# undici\\n' >package/docs/docs/index.md
else
  rm -rf package/docs/docs
fi
tar czf "undici-$version.tgz" package
rm -rf package
echo "undici-$version.tgz"
"""


def run(tmp_path: Path, sets: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    npm = bin_dir / "npm"
    npm.write_text(FAKE_NPM, encoding="utf-8")
    npm.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "NPM_CALLS": str(tmp_path / "calls"),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), str(sets)],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_the_pinned_release_is_fetched_once_and_fetched_again_when_the_pin_moves(tmp_path: Path) -> None:
    assert PINNED is not None
    sets = tmp_path / "sets"

    first = run(tmp_path, sets)
    assert first.returncode == 0, first.stderr
    docs = sets / "undici-docs"
    assert sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*.md")) == ["api/Agent.md", "index.md"]
    assert (sets / "undici.version").read_text(encoding="utf-8").strip() == PINNED.group(1)
    assert calls(tmp_path) == [f"pack --silent undici@{PINNED.group(1)}"]
    assert "2 pages" in first.stdout

    again = run(tmp_path, sets)
    assert again.returncode == 0 and len(calls(tmp_path)) == 1  # kept, not fetched again

    (sets / "undici.version").write_text("0.0.1\n", encoding="utf-8")
    (docs / "stale.md").write_text("# From an older release\n", encoding="utf-8")
    moved = run(tmp_path, sets)
    assert moved.returncode == 0 and len(calls(tmp_path)) == 2
    assert not (docs / "stale.md").exists()


def test_a_release_without_docs_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    sets = tmp_path / "sets"
    ran = run(tmp_path, sets, NO_DOCS="1")
    assert ran.returncode == 1
    assert "holds no docs/docs folder" in ran.stderr
    assert not (sets / "undici-docs").exists() and not (sets / "undici.version").exists()
