"""Files stay small: at most 400 lines in app/, 600 in tests/.

    python .ci/file_sizes.py [ROOT]

A file over its cap must be named in .ci/oversized.txt with the length it may not exceed. The
list only shrinks: an entry whose file has become shorter must be lowered to its new length,
and one whose file is back under the cap (or gone) must be removed, so no entry keeps room for a
file to grow back into. Exit 1 with one line per problem, saying what to change.
"""

from __future__ import annotations

import sys
from pathlib import Path

CAPS = {"app": 400, "tests": 600}
SUFFIXES = {".py", ".mjs", ".ts", ".js"}
ALLOW_LIST = Path(".ci") / "oversized.txt"


def lengths(root: Path) -> dict[str, int]:
    """The number of lines of every capped file under `root`, by path relative to it."""
    found = {}
    for folder in CAPS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "node_modules" not in path.parts:
                found[path.relative_to(root).as_posix()] = len(path.read_text().splitlines())
    return found


def allowed(root: Path) -> dict[str, int]:
    """The allow-list: `<lines> <path>` per line; `#` starts a comment."""
    entries = {}
    list_file = root / ALLOW_LIST
    if list_file.is_file():
        for line in list_file.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                count, path = line.split(maxsplit=1)
                entries[path] = int(count)
    return entries


def problems(root: Path) -> list[str]:
    sizes = lengths(root)
    entries = allowed(root)
    found = []
    for path, count in sizes.items():
        cap = CAPS[path.split("/", 1)[0]]
        if count <= cap:
            if path in entries:
                found.append(f"{path}: {count} lines, under the cap of {cap}: remove it from {ALLOW_LIST}")
            continue
        if path not in entries:
            found.append(f"{path}: {count} lines, over the cap of {cap}: split it (one job per module)")
        elif count > entries[path]:
            found.append(
                f"{path}: {count} lines, more than the {entries[path]} {ALLOW_LIST} allows: "
                "shorten it (the list only shrinks)"
            )
        elif count < entries[path]:
            found.append(
                f"{path}: {count} lines: lower its entry in {ALLOW_LIST} from {entries[path]} to {count}"
            )
    for path in sorted(set(entries) - set(sizes)):
        found.append(f"{path}: no such file: remove it from {ALLOW_LIST}")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    found = problems(root)
    sys.stderr.writelines(f"file sizes: {line}\n" for line in found)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
