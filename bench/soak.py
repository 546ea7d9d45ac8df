"""Memory under load: Anvil's RSS over a 60 s soak (echo engine, dev tokens, SQLite history).

    .venv/bin/python bench/soak.py [--seconds 60]

RSS is sampled after a warm-up and every 10 s while wrk keeps 16 connections busy; the figure is
the growth from the first sample to the last.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import drive, rss_mib
from run import anvil


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="anvil-soak-") as scratch,
        anvil("C", "echo", Path(scratch)) as server,
    ):
        drive(server, flow="modern", ids=64, seconds=5)  # warm-up: caches, conversations, pools
        samples = [rss_mib(server.pid)]
        done = threading.Event()
        result = {}

        def load() -> None:
            result["run"] = drive(server, flow="modern", ids=64, seconds=args.seconds)
            done.set()

        threading.Thread(target=load, daemon=True).start()
        while not done.wait(10):
            samples.append(rss_mib(server.pid))
        samples.append(rss_mib(server.pid))
    run = result["run"]
    growth = 100 * (samples[-1] - samples[0]) / samples[0]
    print(f"RSS MiB every 10 s: {' '.join(f'{s:.1f}' for s in samples)}")
    print(
        f"soak {args.seconds} s, {run.requests} calls ({run.calls_per_second:.0f}/s, {run.errors} errors): "
        f"RSS growth {growth:+.1f} %  [target <= 10 %]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
