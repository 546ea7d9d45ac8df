"""Anvil against the bare SDK and the raw-HTTP limit, side by side, in paired rounds.

    bench/setup.sh && .venv/bin/python bench/run.py [--rounds 5] [--seconds 5]

Servers (each pinned to core 1; wrk on core 0, one thread, 16 connections):
  A   raw ASGI JSON-RPC echo (the physical limit)
  B   bare `mcp` SDK MCPServer, stateless, sync `def` tool
  C   Anvil `ask`, echo engine, dev tokens, SQLite history (2026-07-28 flow and legacy flow,
      turns spread over 64 conversations; and every connection continuing one conversation)
  D   Anvil `ask`, retrieval engine over docs/, dev tokens, SQLite history
Every round runs every server; ratios are taken inside a round and the median over rounds is printed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, LoadResult, Server, drive, free_port, serve

PYTHON = sys.executable
ANVIL = str(Path(PYTHON).with_name("anvil"))
UVICORN = [PYTHON, "-m", "uvicorn", "--log-level", "warning", "--no-access-log"]


def anvil_token(data_dir: Path) -> str:
    env = {"ANVIL_DATA_DIR": str(data_dir)}
    ran = subprocess.run(
        [ANVIL, "token", "--user", "bench"], env=env, capture_output=True, text=True, check=True
    )
    return ran.stdout.strip()


@contextmanager
def anvil(
    name: str, engine: str, data_dir: Path, extra_env: dict[str, str] | None = None
) -> Iterator[Server]:
    port = free_port()
    env = {
        "ANVIL_PORT": str(port),
        "ANVIL_DATA_DIR": str(data_dir),
        "ANVIL_ANSWER_ENGINE": engine,
        "ANVIL_LOG_LEVEL": "warning",
        **(extra_env or {}),
    }
    data_dir.mkdir(parents=True, exist_ok=True)
    token = anvil_token(data_dir)
    # `python -m app.cli`, not the console script: it runs whichever `app` comes first on the
    # path, so `bench/compare.py` can start an older checkout (its command line was a module).
    with serve(name, [PYTHON, "-m", "app.cli", "serve"], env, port, token=token) as server:
        yield server


@contextmanager
def uvicorn_app(name: str, target: str) -> Iterator[Server]:
    port = free_port()
    with serve(
        name, [*UVICORN, "--port", str(port), target], {"PYTHONPATH": str(ROOT / "bench")}, port
    ) as server:
        yield server


# (label, server key, flow, conversation ids spread over; 0 = one-shot)
CASES = [
    ("A raw ASGI echo", "A", "legacy", 0),
    ("B bare SDK 2026-07-28", "B", "modern", 0),
    ("B bare SDK legacy", "B", "legacy", 0),
    ("C Anvil 2026-07-28", "C", "modern", 64),
    ("C Anvil one-shot", "C", "modern", 0),
    ("C Anvil legacy", "C", "legacy", 64),
    ("C Anvil one conversation", "C", "modern", 1),
    ("D Anvil retrieval", "D", "modern", 64),
]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()

    results: dict[str, list[LoadResult]] = {label: [] for label, *_ in CASES}
    with tempfile.TemporaryDirectory(prefix="anvil-bench-") as scratch, ExitStack() as stack:
        servers = {
            "A": stack.enter_context(uvicorn_app("A", "servers.raw_echo:app")),
            "B": stack.enter_context(uvicorn_app("B", "servers.sdk_echo:app")),
            "C": stack.enter_context(anvil("C", "echo", Path(scratch) / "c")),
            "D": stack.enter_context(anvil("D", "retrieval", Path(scratch) / "d")),
        }
        for round_number in range(1, args.rounds + 1):
            for label, key, flow, ids in CASES:
                server = servers[key]
                drive(server, flow=flow, ids=ids, seconds=args.warmup, connections=args.connections)
                result = drive(server, flow=flow, ids=ids, seconds=args.seconds, connections=args.connections)
                if result.errors:
                    print(f"  ! {label}: {result.errors} non-2xx responses", file=sys.stderr)
                results[label].append(result)
            print(f"round {round_number}/{args.rounds} done", file=sys.stderr)

    report(results)
    return 0


def median(values: list[float]) -> float:
    return statistics.median(values)


def report(results: dict[str, list[LoadResult]]) -> None:
    columns = ("CPU µs/call", "calls/s", "p50 ms", "p99 ms", "p99/p50", "RSS MiB")
    print("\n" + f"{'server':<26}" + "".join(f"{c:>12}" for c in columns))
    for label, runs in results.items():
        figures = (
            f"{median([r.cpu_us_per_call for r in runs]):.0f}",
            f"{median([r.calls_per_second for r in runs]):.0f}",
            f"{median([r.p50_ms for r in runs]):.2f}",
            f"{median([r.p99_ms for r in runs]):.2f}",
            f"{median([r.p99_ms / r.p50_ms if r.p50_ms else float('nan') for r in runs]):.2f}",
            f"{max(r.rss_mib for r in runs):.1f}",
        )
        print(f"{label:<26}" + "".join(f"{f:>12}" for f in figures))

    def ratio(numerator: str, denominator: str) -> str:
        pairs = zip(results[numerator], results[denominator], strict=True)
        ratios = [a.cpu_us_per_call / b.cpu_us_per_call for a, b in pairs]
        return f"{median(ratios):.2f}x ({min(ratios):.2f} to {max(ratios):.2f})"

    print("\nCPU per call, median of per-round ratios (lowest to highest round; target in brackets):")
    for text, numerator, denominator, target in (
        ("C / B, 2026-07-28 flow", "C Anvil 2026-07-28", "B bare SDK 2026-07-28", "  [<= 1.0]"),
        ("C / B, legacy flow", "C Anvil legacy", "B bare SDK legacy", "  [<= 1.0]"),
        ("C one-shot / B, 2026-07-28", "C Anvil one-shot", "B bare SDK 2026-07-28", ""),
        ("C (2026-07-28) / A raw ASGI", "C Anvil 2026-07-28", "A raw ASGI echo", ""),
        ("C legacy / C 2026-07-28", "C Anvil legacy", "C Anvil 2026-07-28", "  [<= 1.3]"),
        ("C one conversation / B", "C Anvil one conversation", "B bare SDK 2026-07-28", "  [<= 1.5]"),
        ("D retrieval / C echo", "D Anvil retrieval", "C Anvil 2026-07-28", "  [<= 2.0]"),
    ):
        print(f"  {text:<28}: {ratio(numerator, denominator)}{target}")
    busy = results["C Anvil one conversation"]
    tail = median([r.p99_ms / r.p50_ms if r.p50_ms else float("nan") for r in busy])
    print(f"\nOne conversation, every connection: p99/p50 {tail:.2f}  [<= 10]")


if __name__ == "__main__":
    raise SystemExit(main())
