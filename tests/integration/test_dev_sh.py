"""`./dev.sh serve`, the README's first command: it says what it does and where it serves."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.anvil_server import free_port, stop, wait_until_ready

ROOT = Path(__file__).resolve().parents[2]


def test_dev_sh_serve_says_what_it_starts_and_the_url_it_serves_on(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    env["ANVIL_DATA_DIR"] = str(tmp_path / "data")
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["./dev.sh", "serve", "--port", str(port)],
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
    assert lines[0].startswith("dev.sh: starting Anvil on embedded defaults")
    # Text logs, not JSON, and the last start-up line is the address to use.
    assert not any(line.startswith("{") for line in lines)
    assert any(f"http://127.0.0.1:{port}" in line for line in lines)
