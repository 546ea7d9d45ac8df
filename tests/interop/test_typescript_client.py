"""The TypeScript SDK client in `ts-client/` against a real `anvil serve` with dev sign-in."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.anvil_server import AnvilServer

CLIENT = Path(__file__).with_name("ts-client") / "anvil-client.mts"
RUN_TIMEOUT = 60
#: What the client prints, one line per check, when everything matches.
PASSING_RUN = [
    r"ok: connected to anvil \S+",
    r"ok: tools/list: (.+, )?ask(, .+)?",
    r"ok: ask's outputSchema rejects a malformed envelope",
    r"ok: turn 1 started the conversation and matches the outputSchema",
    r"ok: turn 2 continued the conversation and matches the outputSchema",
    r"ok: turn 2 saw turn 1 \(the echo engine names the previous question\)",
    r"anvil-client: all checks passed",
]


def run_client(node: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(node), "--experimental-strip-types", str(CLIENT), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def test_the_typescript_client_holds_a_conversation(node: Path, dev_server: AnvilServer) -> None:
    ran = run_client(node, dev_server.mcp_url, dev_server.token("ts-alice"))
    assert ran.returncode == 0, f"{ran.stdout}\n{ran.stderr}"
    lines = ran.stdout.splitlines()
    assert len(lines) == len(PASSING_RUN), ran.stdout
    for pattern, line in zip(PASSING_RUN, lines, strict=True):
        assert re.fullmatch(pattern, line), f"{line!r} does not match {pattern!r}"


def test_the_typescript_client_fails_clearly_without_a_token(node: Path, dev_server: AnvilServer) -> None:
    ran = run_client(node, dev_server.mcp_url)
    assert ran.returncode == 1, ran.stdout
    assert ran.stderr.startswith("anvil-client: FAILED:"), ran.stderr
    assert "Sign-in required" in ran.stderr


#: The outputSchema the fake server below advertises for `ask`, and then breaks.
STRICT_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "turn": {"type": ["integer", "null"]}},
    "required": ["answer", "turn"],
}


class WrongEnvelope(BaseHTTPRequestHandler):
    """A legacy MCP server whose `ask` answers with a `turn` its own outputSchema forbids."""

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in message:
            self.send_response(202)
            self.end_headers()
            return
        method = message["method"]
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "anvil", "version": "wrong-envelope"},
            }
        elif method == "tools/list":
            result = {
                "tools": [{"name": "ask", "inputSchema": {"type": "object"}, "outputSchema": STRICT_SCHEMA}]
            }
        else:
            envelope = {"answer": "Echo", "turn": "one"}
            result = {"content": [{"type": "text", "text": "Echo"}], "structuredContent": envelope}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send_response(405)
        self.send_header("Allow", "POST")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def wrong_envelope_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), WrongEnvelope)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_typescript_client_rejects_output_that_breaks_the_schema(
    node: Path, wrong_envelope_url: str
) -> None:
    ran = run_client(node, wrong_envelope_url)
    assert ran.returncode == 1, ran.stdout
    assert ran.stderr.startswith("anvil-client: FAILED:"), ran.stderr
    assert "output schema" in ran.stderr and "turn" in ran.stderr, ran.stderr
