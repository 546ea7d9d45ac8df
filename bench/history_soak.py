"""A soak of the model-based history test: its randomized rounds back to back, for minutes, on one
set of `anvil serve` processes (killed with SIGKILL and restarted along the way).

    .venv/bin/python bench/history_soak.py [--minutes 5] [--store memory|sqlite|cosmos]
        [--processes 2] [--seed N] [--kills 1] [--workers 4] [--steps 20]

Round i runs the schedule of seed N+i (`tests/support/history_model.py`, the same code
`tests/integration/test_history_model.py` runs) and prints its operations and any violation of
the model. Its rounds are longer than the test's (20 steps a worker, and a slower model); with
the test's sizes (`--workers 4 --steps 12`) a seed printed here replays there
(`ANVIL_MODEL_SEED`) and the other way round; `--minutes 0 --seed N` runs the one round of seed
N. The last line sums up; the exit status is 1 if any round broke the model. `--store cosmos`
needs the Node test tools (`npm ci`).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

# The model and its scheduler are the test's own (tests/support), and they import the app.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.cosmos import run_cosmos_server
from support.history_cluster import Cluster, model_env, model_server, write_corpus
from support.history_model import fresh_namespace, new_seed, report, run_round
from support.history_runner import History
from support.history_schedule import make_plan


def summary(history: History) -> dict[str, int]:
    ops = history.ops
    return {
        "ops": len(ops),
        "asks": sum(op.kind == "ask" for op in ops),
        "turns": sum(op.fresh for op in ops),
        "replays": sum(op.replayed for op in ops),
        "cut off": sum(op.cut_off for op in ops),
        "deletes": sum(op.kind in ("delete", "delete_all") for op in ops),
        "reads": sum(op.kind in ("get", "list") for op in ops),
    }


async def soak(args: argparse.Namespace) -> int:
    seed = new_seed() if args.seed is None else args.seed
    kills = 0 if args.store == "memory" else args.kills
    delays = random.Random(seed)
    totals: dict[str, int] = {}
    broken = rounds = 0
    print(
        f"history soak: {args.store}, {args.processes} process(es), {args.minutes} min, seed {seed}, "
        f"{args.workers} workers x {args.steps} steps and {kills} kill(s) a round"
    )
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="anvil-history-soak-")))
        fake = stack.enter_context(model_server(lambda: delays.uniform(0.05, 0.3)))
        env = model_env(fake, write_corpus(scratch / "corpus"))
        if args.store == "cosmos":
            env.update(stack.enter_context(run_cosmos_server()).env())
        cluster = stack.enter_context(Cluster(args.store, args.processes, scratch / "data", env))
        deadline = time.monotonic() + args.minutes * 60
        while not rounds or time.monotonic() < deadline:
            plan = make_plan(
                seed + rounds,
                namespace=fresh_namespace(),
                processes=args.processes,
                workers=args.workers,
                steps=args.steps,
                kills=kills,
            )
            started = time.monotonic()
            history = await run_round(cluster, fake, plan)
            fake.requests.clear()  # nothing is in flight between rounds; the list would only grow
            counts = summary(history)
            for name, count in counts.items():
                totals[name] = totals.get(name, 0) + count
            rounds += 1
            verdict = f"{len(history.violations)} violation(s)" if history.violations else "ok"
            if history.undecided:
                verdict += f" (order search gave up on {', '.join(history.undecided)})"
            print(
                f"round {rounds:3d} seed {plan.seed}: "
                + ", ".join(f"{count} {name}" for name, count in counts.items())
                + f" in {time.monotonic() - started:.1f} s: {verdict}",
                flush=True,
            )
            if history.violations:
                broken += 1
                print(report(history, plan, f"{args.store}-{args.processes}p"))
                print(cluster.logs())
    print(
        f"soak: {rounds} rounds, "
        + ", ".join(f"{count} {name}" for name, count in totals.items())
        + f"; {broken} round(s) broke the model  [target 0]"
    )
    return 1 if broken else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--store", choices=["memory", "sqlite", "cosmos"], default="sqlite")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None, help="first round's seed (default: a random one)")
    parser.add_argument("--kills", type=int, default=1, help="SIGKILLs and restarts a round (not on memory)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="steps of each worker in a round")
    args = parser.parse_args()
    if args.store == "memory" and args.processes != 1:
        parser.error("the memory store lives in one process: pass --processes 1")
    if args.processes < 1 or args.workers < 1 or args.steps < 1 or args.kills < 0:
        parser.error("--processes, --workers and --steps must be at least 1, --kills at least 0")
    return asyncio.run(soak(args))


if __name__ == "__main__":
    raise SystemExit(main())
