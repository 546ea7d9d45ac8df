"""`./dev.sh serve`, the README's first command: it says what it does and where it serves, as
docs/development.md shows it."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from support.anvil_server import free_port, stop, wait_until_ready
from support.doc_blocks import blocks, differs

ROOT = Path(__file__).resolve().parents[2]


def test_dev_sh_serve_prints_what_the_docs_show(tmp_path: Path) -> None:
    [block] = [b for b in blocks("docs/development.md") if b.heading == "What `./dev.sh serve` prints"]
    assert block.text == "./dev.sh serve\n" and block.shown is not None
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    # The port and the data folder are this run's; the rest is the embedded defaults.
    env.update(ANVIL_PORT=str(port), ANVIL_DATA_DIR=str(tmp_path / "data"))
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        # The command itself rather than a shell, so that stopping it stops the server.
        process = subprocess.Popen(
            shlex.split(block.text),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process, log_path)
    finally:
        stop(process)
    lines = log_path.read_text().splitlines()
    # Text logs, not JSON, and the last start-up line is the address to use.
    assert not any(line.startswith("{") for line in lines)
    ready = next(n for n, line in enumerate(lines) if "Anvil ready on " in line)
    assert lines[ready].endswith(
        f"Anvil ready on http://127.0.0.1:{port}: store=sqlite engine=retrieval auth=dev"
    )
    started = "\n".join(lines[: ready + 1])
    problem = differs(block.shown, started, {str(tmp_path / "data"): ".anvil", f"{ROOT}/": ""})
    if problem is not None and "in the background" in started:
        problem += (
            "\n(the docs changed since docs/.anvil-vectors: run .venv/bin/python bench/docs_vectors.py)"
        )
    assert problem is None, problem


def test_a_long_install_step_says_it_is_still_going(tmp_path: Path) -> None:
    # The functions of dev.sh as it defines them, driven on a step that outlasts two heartbeats.
    script = (ROOT / "dev.sh").read_text()
    functions = script.split('\ncase "${1:-}" in', 1)[0].replace('cd "$(dirname "$0")"', "")
    ran = subprocess.run(
        ["bash", "-c", functions + '\nwith_heartbeat "installing things" sleep 0.5; echo "status $?"'],
        env={**os.environ, "HEARTBEAT_TENTHS": "2"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert "status 0" in ran.stdout
    said = [line for line in ran.stderr.splitlines() if "still installing things" in line]
    assert len(said) >= 1 and said[0].startswith("dev.sh: ... still installing things (")
