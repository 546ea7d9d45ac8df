"""`bench/eval_sets.sh`, which fetches the docs `bench/questions/` asks about, run against
an `npm` stand-in and a `python3` stand-in (for `pip download`) that pack made-up releases: what
lands where, that a set already fetched at its pinned release is kept, and that a release without
docs is refused. The script runs from a copy in a folder of its own, so that no `.venv` of the
checkout stands in for the `python3` stand-in."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "eval_sets.sh"
#: Each set's package, pinned release and docs folder, as the script fetches them.
PINNED = dict(
    (name, (version, folder))
    for name, version, folder in re.findall(
        r"^fetch(?:_pypi)? (\S+) (\S+) (\S+)$", SCRIPT.read_text(encoding="utf-8"), re.M
    )
)
#: The sets fetched from PyPI rather than the npm registry, and the pages their stand-in packs.
PYPI = set(re.findall(r"^fetch_pypi (\S+) ", SCRIPT.read_text(encoding="utf-8"), re.M))

# Packs `NAME-VERSION.tgz` as `npm pack` does, with two pages in the folder `FOLDERS` names for
# NAME (none when NO_DOCS is set), and notes each call; fails as an unreachable registry makes it
# fail when NPM_FAILS is set.
FAKE_NPM = """#!/usr/bin/env bash
set -euo pipefail
echo "$*" >>"$NPM_CALLS"
if [ -n "${NPM_FAILS:-}" ]; then
  echo "npm error network request failed" >&2
  exit 1
fi
spec=${@: -1}
name=${spec%@*}
version=${spec#*@}
folder=$(sed -n "s/^$name //p" "$FOLDERS")
if [ -z "${NO_DOCS:-}" ]; then
  mkdir -p "package/$folder/guide"
  printf '# Guide\\n\\nA guide.\\n' >"package/$folder/guide/start.md"
  printf '# %s\\n' "$name" >"package/$folder/index.md"
else
  mkdir -p package
fi
tar czf "$name-$version.tgz" package
rm -rf package
echo "$name-$version.tgz"
"""


# Stands in for `python3 -m pip download --quiet --no-deps --no-binary :all: NAME==VERSION -d DIR`:
# writes the source distribution DIR/NAME-VERSION.tar.gz with two pages in the folder `FOLDERS`
# names for NAME (none when NO_DOCS is set), and notes each call; fails as an unreachable index
# makes it fail when NPM_FAILS is set.
FAKE_PYTHON = """#!/usr/bin/env bash
set -euo pipefail
echo "$*" >>"$NPM_CALLS"
if [ -n "${NPM_FAILS:-}" ]; then
  echo "ERROR: No matching distribution found" >&2
  exit 1
fi
spec=${@: -3:1}
dest=${@: -1}
name=${spec%==*}
version=${spec#*==}
folder=$(sed -n "s/^$name //p" "$FOLDERS")
work=$(mktemp -d)
mkdir -p "$work/$name-$version"
if [ -z "${NO_DOCS:-}" ]; then
  mkdir -p "$work/$name-$version/$folder/guide"
  printf 'Guide\\n=====\\n\\nA guide.\\n' >"$work/$name-$version/$folder/guide/start.rst"
  printf '%s\\n' "$name" >"$work/$name-$version/$folder/index.rst"
fi
tar czf "$dest/$name-$version.tar.gz" -C "$work" "$name-$version"
rm -rf "$work"
"""


def run(tmp_path: Path, sets: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool, text in (("npm", FAKE_NPM), ("python3", FAKE_PYTHON)):
        (bin_dir / tool).write_text(text, encoding="utf-8")
        (bin_dir / tool).chmod(0o755)
    script = tmp_path / "repo" / "bench" / "eval_sets.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SCRIPT, script)
    folders = tmp_path / "folders"
    folders.write_text(
        "".join(f"{name} {folder}\n" for name, (_, folder) in PINNED.items()), encoding="utf-8"
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "NPM_CALLS": str(tmp_path / "calls"),
        "FOLDERS": str(folders),
    }
    return subprocess.run(
        ["bash", str(script), str(sets)],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def fetched(name: str, version: str) -> str:
    """The call that fetches NAME's pinned release, as the stand-ins note it."""
    if name in PYPI:
        return f"-m pip download --quiet --no-deps --no-binary :all: {name}=={version} -d"
    return f"pack --silent {name}@{version}"


def test_each_pinned_release_is_fetched_once_and_fetched_again_when_its_pin_moves(tmp_path: Path) -> None:
    assert set(PINNED) == {"undici", "npm", "fastify", "pino", "flask"} and {"flask"} == PYPI
    sets = tmp_path / "sets"

    first = run(tmp_path, sets)
    assert first.returncode == 0, first.stderr
    for name, (version, _) in PINNED.items():
        docs, ext = sets / f"{name}-docs", "rst" if name in PYPI else "md"
        assert sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*.*")) == [
            f"guide/start.{ext}",
            f"index.{ext}",
        ]
        assert (sets / f"{name}.version").read_text(encoding="utf-8").strip() == version
        assert f"{name} {version} docs: 2 pages" in first.stdout
    assert sorted(re.sub(r" -d \S+$", " -d", c) for c in calls(tmp_path)) == sorted(
        fetched(name, v) for name, (v, _) in PINNED.items()
    )

    again = run(tmp_path, sets)
    assert again.returncode == 0 and len(calls(tmp_path)) == len(PINNED)  # kept, not fetched again

    (sets / "undici.version").write_text("0.0.1\n", encoding="utf-8")
    (sets / "undici-docs" / "stale.md").write_text("# From an older release\n", encoding="utf-8")
    moved = run(tmp_path, sets)
    assert moved.returncode == 0
    assert calls(tmp_path)[len(PINNED) :] == [f"pack --silent undici@{PINNED['undici'][0]}"]
    assert not (sets / "undici-docs" / "stale.md").exists()


def test_a_release_without_docs_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    sets = tmp_path / "sets"
    ran = run(tmp_path, sets, NO_DOCS="1")
    assert ran.returncode == 1
    assert f"undici {PINNED['undici'][0]} holds no docs/docs folder" in ran.stderr
    assert not (sets / "undici-docs").exists() and not (sets / "undici.version").exists()


def test_a_release_npm_cannot_fetch_is_named_and_leaves_nothing_behind(tmp_path: Path) -> None:
    sets, scratch = tmp_path / "sets", tmp_path / "tmp"
    scratch.mkdir()
    ran = run(tmp_path, sets, NPM_FAILS="1", TMPDIR=str(scratch))
    assert ran.returncode == 1
    assert f"could not fetch undici {PINNED['undici'][0]} from the npm registry" in ran.stderr
    assert not (sets / "undici-docs").exists() and not (sets / "undici.version").exists()
    assert list(scratch.iterdir()) == []  # its scratch folder removed


def test_a_pypi_release_without_docs_or_out_of_reach_is_refused_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    name, (version, folder) = next((n, PINNED[n]) for n in sorted(PYPI))
    sets, scratch = tmp_path / "sets", tmp_path / "tmp"
    scratch.mkdir()
    # The npm sets fetched first, so that only the PyPI one meets the failure.
    assert run(tmp_path, sets, NO_DOCS="", TMPDIR=str(scratch)).returncode == 0
    shutil.rmtree(sets / f"{name}-docs")
    (sets / f"{name}.version").unlink()

    empty = run(tmp_path, sets, NO_DOCS="1", TMPDIR=str(scratch))
    assert empty.returncode == 1
    assert f"{name} {version} holds no {folder} folder" in empty.stderr
    out_of_reach = run(tmp_path, sets, NPM_FAILS="1", TMPDIR=str(scratch))
    assert out_of_reach.returncode == 1
    assert f"could not fetch {name} {version} from PyPI" in out_of_reach.stderr
    assert not (sets / f"{name}-docs").exists() and not (sets / f"{name}.version").exists()
    assert list(scratch.iterdir()) == []
