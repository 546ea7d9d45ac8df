"""Start benchmark servers pinned to a core, drive them with wrk, and read their CPU and memory."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOAD_SCRIPT = Path(__file__).with_name("load.lua")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(core: int | None, argv: list[str]) -> list[str]:
    """`argv` run on one core (when there are cores to spare), so server and load do not share."""
    if core is None or shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return argv
    return ["taskset", "-c", str(core), *argv]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def call_body(flow: str, conversation_id: str | None = None) -> bytes:
    arguments: dict[str, object] = {"question": "How long does a conversation live?"}
    if conversation_id:
        arguments["conversationId"] = conversation_id
    params: dict[str, object] = {"name": "ask", "arguments": arguments}
    if flow == "modern":
        params["_meta"] = MODERN_META
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()


def call_headers(flow: str, token: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if flow == "modern":
        headers.update({"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "ask"})
    return headers


def post(url: str, flow: str, token: str | None, conversation_id: str | None = None) -> dict[str, object]:
    request = urllib.request.Request(url, call_body(flow, conversation_id), call_headers(flow, token))
    with urllib.request.urlopen(request, timeout=10) as response:
        reply: dict[str, object] = json.loads(response.read())
        return reply


@dataclass
class Server:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    token: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def serve(
    name: str,
    argv: list[str],
    env: Mapping[str, str],
    port: int,
    *,
    token: str | None = None,
    core: int | None = 1,
) -> Iterator[Server]:
    """Run a server and wait until it answers a tools/call; always stop it.

    Its stderr goes to a file: a pipe nobody reads fills up (64 KiB) and then blocks the
    server's event loop on its next log line, which looks like a server that hangs.
    """
    url = f"http://127.0.0.1:{port}/mcp"
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            pinned(core, argv), env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=log
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"{name} exited: {log.read().decode(errors='replace')}")
                try:
                    post(url, "legacy", token)
                    break
                except (urllib.error.URLError, ConnectionError, OSError):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{name} did not start") from None
                    time.sleep(0.05)  # readiness poll interval
            yield Server(name, url, process, token)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass
class LoadResult:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_seconds: float
    rss_mib: float

    @property
    def calls_per_second(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_us_per_call(self) -> float:
        return 1e6 * self.cpu_seconds / max(self.requests, 1)


_DURATION = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * _DURATION[unit]


def drive(
    server: Server, *, flow: str, ids: int, seconds: float, connections: int = 16, core: int | None = 0
) -> LoadResult:
    """Run wrk against `server` and measure the server's CPU over exactly that run."""
    env = {**os.environ, "BENCH_FLOW": flow, "BENCH_TOKEN": server.token or "", "BENCH_IDS": str(ids)}
    argv = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "-s",
        str(LOAD_SCRIPT),
        server.url,
    ]
    before = cpu_seconds(server.pid)
    ran = subprocess.run(pinned(core, argv), env=env, capture_output=True, text=True, check=True)
    cpu = cpu_seconds(server.pid) - before
    out = ran.stdout
    requests, elapsed = re.search(r"(\d+) requests in ([\d.]+(?:us|ms|s|m))", out).groups()  # type: ignore[union-attr]
    if os.environ.get("BENCH_DEBUG"):
        print(out, file=sys.stderr)
    latency = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+(?:us|ms|s|m))", out, flags=re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: .*", out)
    if socket_errors:
        print(f"  ! {server.name}: {socket_errors.group(0)}", file=sys.stderr)
    return LoadResult(
        requests=int(requests),
        seconds=_ms(elapsed) / 1e3,
        p50_ms=_ms(latency["50"]),
        p99_ms=_ms(latency["99"]),
        errors=int(errors.group(1)) if errors else 0,
        cpu_seconds=cpu,
        rss_mib=rss_mib(server.pid),
    )


def alternate(servers: Mapping[str, Server], *, rounds: int, seconds: float) -> dict[str, list[LoadResult]]:
    """Warm every server up (its conversations reach their turn limit), then drive them in turn
    for `rounds` short runs of 2026-07-28 turns over 64 conversations, reversing the order every
    other round so that no server always runs first; each one's results, by name."""
    results: dict[str, list[LoadResult]] = {name: [] for name in servers}
    for server in servers.values():
        drive(server, flow="modern", ids=64, seconds=2)
    for round_number in range(rounds):
        order = list(servers.items())
        if round_number % 2:
            order.reverse()
        for name, server in order:
            results[name].append(drive(server, flow="modern", ids=64, seconds=seconds))
    return results
