"""The file-size cap `.ci/run` enforces (.ci/file_sizes.py), and its allow-list that only shrinks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / ".ci" / "file_sizes.py"


def check(root: Path) -> tuple[int, list[str]]:
    ran = subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)
    return ran.returncode, ran.stderr.splitlines()


def tree(tmp_path: Path, files: dict[str, int], allow: str = "") -> Path:
    for name, lines in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * lines)
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "oversized.txt").write_text(allow)
    return tmp_path


def test_the_repository_keeps_its_caps() -> None:
    assert check(ROOT) == (0, [])


def test_a_file_over_its_cap_and_not_listed_fails(tmp_path: Path) -> None:
    code, lines = check(tree(tmp_path, {"app/a.py": 401, "tests/t.py": 600}))
    assert code == 1
    assert lines == ["file sizes: app/a.py: 401 lines, over the cap of 400: split it (one job per module)"]


def test_a_listed_file_may_not_grow(tmp_path: Path) -> None:
    code, lines = check(tree(tmp_path, {"tests/t.py": 700}, "650 tests/t.py\n"))
    assert code == 1
    assert "more than the 650" in lines[0]


def test_the_list_follows_a_file_down_and_lets_it_go_under_the_cap(tmp_path: Path) -> None:
    allow = "# shrinking\n700 tests/t.py\n500 app/gone.py\n450 app/small.py\n"
    code, lines = check(tree(tmp_path, {"tests/t.py": 650, "app/small.py": 10}, allow))
    assert code == 1
    assert lines == [
        "file sizes: app/small.py: 10 lines, under the cap of 400: remove it from .ci/oversized.txt",
        "file sizes: tests/t.py: 650 lines: lower its entry in .ci/oversized.txt from 700 to 650",
        "file sizes: app/gone.py: no such file: remove it from .ci/oversized.txt",
    ]


def test_a_listed_file_at_its_length_passes(tmp_path: Path) -> None:
    assert check(tree(tmp_path, {"app/a.py": 420}, "420 app/a.py\n")) == (0, [])
