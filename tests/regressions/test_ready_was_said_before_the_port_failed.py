"""A second `anvil serve` on a taken port logged "Anvil ready on http://127.0.0.1:8000", then
"[Errno 98] error while attempting to bind ... address already in use", and exited 3 with no hint
of `--port` or `ANVIL_PORT`. Fixed in 0.6.0: the socket is taken first, a failure is one line
naming the address and what to pass instead, and "ready" is said only once the app has started
and its socket is served."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import httpx
from support.anvil_server import anvil_command, free_port, run_anvil

from app.serve.server import EXIT_NOT_STARTED


def messages(output: str) -> list[str]:
    """The messages of the JSON log lines in `output`."""
    return [json.loads(line)["message"] for line in output.splitlines() if line.startswith("{")]


def serve(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """`anvil serve` that is expected to stop by itself."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    env |= {"ANVIL_DATA_DIR": str(tmp_path / "data"), "ANVIL_EMBEDDINGS": "none", **settings}
    return subprocess.run(
        [*anvil_command(), "serve"], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_taken_port_is_one_line_naming_the_address_and_what_to_pass(tmp_path: Path) -> None:
    with run_anvil(tmp_path / "first", {"ANVIL_LOG_LEVEL": "info"}) as first:
        port = first.url.rsplit(":", 1)[1]
        ran = serve(tmp_path, ANVIL_PORT=port)
        assert httpx.get(f"{first.url}/healthz").status_code == 200  # the first one serves on
        assert f"Anvil ready on http://127.0.0.1:{port}" in first.log()
    output = ran.stdout + ran.stderr
    assert ran.returncode == EXIT_NOT_STARTED
    assert "Traceback" not in output and "Anvil ready" not in output
    assert messages(output) == [
        f"Anvil cannot start: cannot listen on 127.0.0.1:{port}: port {port} is already in use "
        "(is another Anvil running?); pass --port (or set ANVIL_PORT) with a free one"
    ]


def test_a_host_that_is_not_this_machines_is_named(tmp_path: Path) -> None:
    ran = serve(tmp_path, ANVIL_HOST="192.0.2.1", ANVIL_PORT=str(free_port()), ANVIL_AUTH_MODE="none")
    assert ran.returncode == EXIT_NOT_STARTED
    (message,) = messages(ran.stdout + ran.stderr)
    assert message.startswith("Anvil cannot start: cannot listen on 192.0.2.1:")
    assert "pass --host (or set ANVIL_HOST)" in message


def test_a_start_that_fails_later_never_says_ready(tmp_path: Path) -> None:
    ran = serve(
        tmp_path,
        ANVIL_PORT=str(free_port()),
        ANVIL_CORPUS_DIR=str(tmp_path / "nowhere"),
        ANVIL_LOG_LEVEL="info",
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == EXIT_NOT_STARTED
    assert not [m for m in messages(output) if "Anvil ready" in m]
    assert any("ANVIL_CORPUS_DIR" in m for m in messages(output))


def test_ready_is_said_once_the_socket_answers(tmp_path: Path) -> None:
    with run_anvil(tmp_path, {"ANVIL_LOG_LEVEL": "info"}) as server:
        said = [m for m in messages(server.log()) if m.startswith("Anvil ready")]
        assert said == [f"Anvil ready on {server.url}: store=sqlite engine=retrieval auth=dev"]
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5):
            pass
