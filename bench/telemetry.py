"""What telemetry costs: CPU per call of a 2026-07-28 turn with history, side by side.

    .venv/bin/python bench/telemetry.py [--rounds 12] [--seconds 2]

Three `anvil serve` processes of this checkout (echo engine, dev tokens, SQLite history over 64
conversations, logging at INFO to a file), driven in alternating short runs with wrk:

  quiet     no access log, no exporter (the defaults)
  access    the access log (`ANVIL_ACCESS_LOG=true`), no exporter
  otlp      traces, metrics and logs exported over OTLP/HTTP to a local sink that answers every
            export with 200 (spans batched, metrics every 60 s), every trace sampled
  otlp-10%  the same with `OTEL_TRACES_SAMPLER=traceidratio` at 0.1

Prints each one's median CPU per call and the median of the per-round ratios against `quiet`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import alternate
from run import anvil, uvicorn_app


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="anvil-telemetry-") as scratch, ExitStack() as stack:
        sink = stack.enter_context(uvicorn_app("sink", "servers.sink:app"))
        info = {"ANVIL_LOG_LEVEL": "info"}
        otlp = {**info, "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url.removesuffix("/mcp")}
        configurations = {
            "quiet": info,
            "access": {**info, "ANVIL_ACCESS_LOG": "true"},
            "otlp": otlp,
            "otlp-10%": {**otlp, "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"},
        }
        servers = {
            name: stack.enter_context(anvil(name, "echo", Path(scratch) / name, env))
            for name, env in configurations.items()
        }
        results = alternate(servers, rounds=args.rounds, seconds=args.seconds)

    for name, runs in results.items():
        cpu = statistics.median(r.cpu_us_per_call for r in runs)
        pairs = zip(runs, results["quiet"], strict=True)
        ratio = statistics.median(r.cpu_us_per_call / q.cpu_us_per_call for r, q in pairs)
        print(f"{name:<9} CPU {cpu:.0f} µs/call, {ratio:.3f}x quiet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
