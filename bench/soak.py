"""A soak: errors, latency and memory of one Anvil process under steady load (echo engine, dev
tokens, SQLite history over 64 conversations).

    .venv/bin/python bench/soak.py [--flow modern|handshake|legacy] [--seconds 600] [--interval 60]

wrk keeps 16 connections busy for `--seconds`, in back-to-back runs of `--interval` seconds;
each run prints its calls, errors, p50/p99 latency and the server's RSS, so a slow-down, a hang
or a leak shows as a trend. `handshake` sends the whole legacy flow (initialize,
notifications/initialized, tools/call); `legacy` only the calls.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import drive, rss_mib
from run import anvil


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--flow", choices=["modern", "handshake", "legacy"], default="modern")
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--interval", type=int, default=10)
    args = parser.parse_args()
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="anvil-soak-") as scratch,
        anvil("C", "echo", Path(scratch)) as server,
    ):
        drive(server, flow=args.flow, ids=64, seconds=5)  # warm-up: caches, conversations, pools
        first_rss = rss_mib(server.pid)
        print(f"{args.flow} flow, RSS after warm-up {first_rss:.1f} MiB")
        print("   at s    calls   calls/s  errors  p50 ms  p99 ms  RSS MiB")
        for start in range(0, args.seconds, args.interval):
            run = drive(server, flow=args.flow, ids=64, seconds=min(args.interval, args.seconds - start))
            runs.append(run)
            print(
                f"{start + args.interval:7d} {run.requests:8d} {run.calls_per_second:9.0f} {run.errors:7d} "
                f"{run.p50_ms:7.2f} {run.p99_ms:7.2f} {run.rss_mib:8.1f}"
            )
    growth = 100 * (runs[-1].rss_mib - first_rss) / first_rss
    errors = sum(run.errors for run in runs)
    p50 = [run.p50_ms for run in runs]
    print(
        f"soak {args.seconds} s, {sum(r.requests for r in runs)} requests, {errors} errors  [target 0]; "
        f"p50 first/last {p50[0]:.2f}/{p50[-1]:.2f} ms; RSS growth {growth:+.1f} %  [target <= 10 %]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
