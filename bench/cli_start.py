"""How long `anvil --version` and `anvil --help` take, from exec to exit: what a user waits for
before the command line answers at all.

    .venv/bin/python bench/cli_start.py [--runs 15]

Each command is run `--runs` times (after one run that warms the file cache); the median and the
fastest are printed, with the same for a bare `python -c pass` beside them, which is the floor
no command line in Python goes below on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import ANVIL


def timed(argv: list[str], runs: int) -> list[float]:
    subprocess.run(argv, capture_output=True, check=True)
    found = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        found.append(time.perf_counter() - started)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for label, argv in (
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("anvil --version", [ANVIL, "--version"]),
        ("anvil --help", [ANVIL, "--help"]),
        ("anvil serve --help", [ANVIL, "serve", "--help"]),
    ):
        runs = timed(argv, args.runs)
        median, fastest = statistics.median(runs) * 1e3, min(runs) * 1e3
        print(f"{label:<20} median {median:6.0f} ms, fastest {fastest:6.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
