"""Run the Cosmos DB-compatible test server (`cosmos_server.mjs`) and talk to its admin API."""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from support.anvil_server import stop

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE = REPO_ROOT / "node_modules" / ".bin" / "node"
LAUNCHER = Path(__file__).with_name("cosmos_server.mjs")
START_TIMEOUT = 30.0

#: The Cosmos DB emulator's well-known key. The test server accepts any key; this one looks real
#: to the SDK (a base64 HMAC key) and is public, so nothing secret ever appears in tests.
EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


def node_available() -> bool:
    """Whether `npm ci` has installed Node and the test server at the repository root."""
    return NODE.exists() and (REPO_ROOT / "node_modules" / "@vercel" / "cosmosdb-server").is_dir()


@dataclass
class CosmosServer:
    """A running test server: the Cosmos DB endpoint, and the admin API for counts and faults."""

    port: int
    admin_port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}/"

    @property
    def key(self) -> str:
        return EMULATOR_KEY

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def env(self, **extra: str) -> dict[str, str]:
        """`ANVIL_*` variables that point `anvil serve` at this server (creating the container)."""
        return {
            "ANVIL_STORE": "cosmos",
            "ANVIL_COSMOS_ENDPOINT": self.endpoint,
            "ANVIL_COSMOS_KEY": self.key,
            "ANVIL_COSMOS_CREATE_IF_MISSING": "true",
            **extra,
        }

    def counts(self) -> dict[str, int]:
        """Requests received since the last `reset`, by operation (read, query, write, ...)."""
        return dict(self._admin("GET", "/counts"))

    def reset(self) -> None:
        """Zero the counts and drop every pending fault."""
        self._admin("POST", "/reset")

    def inject(
        self,
        op: str,
        status: int,
        count: int = 1,
        *,
        retry_after_ms: int | None = None,
        when: str = "before",
        path: str | None = None,
    ) -> None:
        """Answer the next `count` requests of kind `op` with `status` (see `cosmos_server.mjs`)."""
        fault: dict[str, Any] = {"op": op, "status": status, "count": count, "when": when}
        if retry_after_ms is not None:
            fault["retryAfterMs"] = retry_after_ms
        if path is not None:
            fault["path"] = path
        self._admin("POST", "/faults", fault)

    def pending_faults(self) -> list[dict[str, Any]]:
        return list(self._admin("GET", "/faults"))

    def stop(self) -> None:
        """Stop the server now (later calls do nothing)."""
        _reap(self.process)

    def _admin(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(method, self.admin_url + path, json=body, timeout=5.0)
        response.raise_for_status()
        return response.json()


@contextmanager
def run_cosmos_server() -> Iterator[CosmosServer]:
    """Start the test server on free loopback ports; always stop it afterwards.

    Readiness is the launcher's first stdout line, printed once both ports listen.
    """
    if not node_available():
        raise RuntimeError(f"{NODE} is missing: run `npm ci` at the repository root")
    # stderr goes to a file: a pipe nobody reads could fill up and stall the server.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [str(NODE), str(LAUNCHER), "--exit-with-stdin"],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            ports = _first_line(process, log)
            yield CosmosServer(port=int(ports["port"]), admin_port=int(ports["adminPort"]), process=process)
        finally:
            _reap(process)


def _first_line(process: subprocess.Popen[bytes], log: IO[bytes]) -> dict[str, Any]:
    """The launcher's ports line; fails with its stderr if it exits or stays silent too long."""
    assert process.stdout is not None
    stdout = process.stdout
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    if not line or not line[0].strip():
        _reap(process)
        log.seek(0)
        raise RuntimeError(f"the Cosmos DB test server did not start:\n{log.read().decode(errors='replace')}")
    return dict(json.loads(line[0]))


def _reap(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        # Closing stdin is the launcher's signal to exit; terminate covers a stuck event loop.
        if process.stdin is not None and not process.stdin.closed:
            process.stdin.close()
        stop(process)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None and not stream.closed:
            stream.close()
