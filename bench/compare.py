"""Two versions of Anvil side by side: CPU per call of a 2026-07-28 turn with history.

    git worktree add /tmp/other <commit> && .venv/bin/python bench/compare.py /tmp/other

Runs `anvil serve` from this checkout and from another one (its `app` package put first on
PYTHONPATH, with this checkout's environment), both pinned to core 1, and drives them in
alternating short runs with wrk (echo engine, dev tokens, SQLite history over 64
conversations). Prints each one's median CPU per call and p99, and the median of the per-round
ratios other / this: on a 2-core virtual machine, 12 rounds of 2 seconds resolve about 3 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, alternate
from run import anvil


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("other", type=Path, help="another checkout of the project")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    if not (args.other / "app" / "__init__.py").is_file():
        parser.error(f"{args.other} is not a checkout of the project (no app/__init__.py)")

    checkouts = {"this": ROOT, "other": args.other.resolve()}
    with tempfile.TemporaryDirectory(prefix="anvil-compare-") as scratch, ExitStack() as stack:
        servers = {
            # The other checkout's `app` package comes first on its server's import path; a dev
            # token from this checkout's issuer serves both (same key file format).
            name: stack.enter_context(
                anvil(name, "echo", Path(scratch) / name, {"PYTHONPATH": str(checkout)})
            )
            for name, checkout in checkouts.items()
        }
        results = alternate(servers, rounds=args.rounds, seconds=args.seconds)

    for name, runs in results.items():
        cpu = statistics.median(r.cpu_us_per_call for r in runs)
        p99 = statistics.median(r.p99_ms for r in runs)
        print(f"{name:<6} {checkouts[name]}: CPU {cpu:.0f} µs/call, p99 {p99:.1f} ms")
    pairs = zip(results["other"], results["this"], strict=True)
    ratio = statistics.median(o.cpu_us_per_call / t.cpu_us_per_call for o, t in pairs)
    print(f"other / this, median of per-round ratios: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
