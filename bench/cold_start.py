"""Cold start: time from exec of `anvil serve` to the first answered `ask`, on embedded defaults.

    .venv/bin/python bench/cold_start.py [--runs 7]

Embedded defaults: SQLite store, retrieval engine over docs/, dev sign-in. The data folder and
the dev key exist already (as after a scale-to-zero restart); each run starts a new process.
The project's bytecode is compiled first, as the container image has it (`pip install .`
compiles it), whatever PYTHONDONTWRITEBYTECODE says.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, free_port, pinned, post
from run import anvil_token


def one_start(data_dir: Path, token: str) -> float:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    env.update({"ANVIL_DATA_DIR": str(data_dir), "ANVIL_PORT": str(port), "ANVIL_LOG_LEVEL": "warning"})
    started = time.perf_counter()
    process = subprocess.Popen(
        # `python -m app.cli`: the `app` first on the path (PYTHONPATH=another checkout measures it).
        pinned(1, [sys.executable, "-m", "app.cli", "serve"]),
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        while True:
            try:
                post(url, "modern", token)
                return time.perf_counter() - started
            except (urllib.error.URLError, ConnectionError, OSError):
                if process.poll() is not None:
                    raise RuntimeError(
                        process.stderr.read().decode() if process.stderr else "exited"
                    ) from None
                time.sleep(0.002)  # connection poll interval
    finally:
        process.terminate()
        process.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "app", quiet=1)
    with tempfile.TemporaryDirectory(prefix="anvil-cold-") as scratch:
        data_dir = Path(scratch)
        token = anvil_token(data_dir)
        one_start(data_dir, token)  # first run warms the OS file cache
        times = [one_start(data_dir, token) for _ in range(args.runs)]
    print(
        f"cold start, exec to first answered ask: median {statistics.median(times):.2f} s "
        f"(min {min(times):.2f}, max {max(times):.2f}, {args.runs} runs)  [target <= 1.2 s]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
