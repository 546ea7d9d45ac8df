"""`anvil serve` over a data folder of a test's making: served under umask 022 and reaped, or
refused at start-up with its one message."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from support.anvil_server import AnvilServer, anvil_command, free_port, stop, wait_until_ready

DATABASE = "conversations.sqlite3"
RUN_TIMEOUT = 60


def environment(data_dir: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    return env | {"ANVIL_DATA_DIR": str(data_dir), "ANVIL_ANSWER_ENGINE": "echo", **settings}


@contextmanager
def serving(data_dir: Path, log_path: Path, **settings: str) -> Iterator[AnvilServer]:
    """`anvil serve` under umask 022 (its log kept outside the data folder), ready, then reaped."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*anvil_command(), "serve"],
            env=environment(data_dir, ANVIL_PORT=str(port), **settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            umask=0o022,
        )
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process, log_path)
        yield AnvilServer(
            url=f"http://127.0.0.1:{port}", data_dir=data_dir, log_path=log_path, process=process
        )
    finally:
        stop(process)


def refused_start(data_dir: Path, prefix: Sequence[str] = (), **settings: str) -> str:
    """The one `Anvil cannot start: ...` message of an `anvil serve` that must not start (exit 3)."""
    ran = subprocess.run(
        [*prefix, *anvil_command(), "serve"],
        env=environment(data_dir, ANVIL_PORT=str(free_port()), **settings),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        umask=0o022,
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == 3, output
    assert "Traceback" not in output
    assert "not a usable SQLite database" not in output
    (reason,) = [m for m in messages(output) if "Anvil cannot start" in m]
    return reason.split("Anvil cannot start: ", 1)[1]


def messages(log: str) -> list[str]:
    return [json.loads(line)["message"] for line in log.splitlines() if line.strip()]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def ask(server: AnvilServer) -> None:
    headers = {"Authorization": f"Bearer {server.token('owner')}"}
    answered = httpx.post(
        f"{server.url}/api/ask", json={"question": "q", "conversationId": "c-1"}, headers=headers
    )
    assert answered.status_code == 200, answered.text
