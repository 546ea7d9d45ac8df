"""`infra/smoke.sh` against real servers, with sign-in on and off, and against nothing at all."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from support.anvil_server import AnvilServer, free_port, run_anvil

SMOKE = Path(__file__).resolve().parents[2] / "infra" / "smoke.sh"
RUN_TIMEOUT = 60


def smoke(*args: str) -> subprocess.CompletedProcess[str]:
    # python3 is the interpreter running the tests, so the script needs nothing else installed.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "SMOKE_TIMEOUT": "10"}
    env.pop("ANVIL_TOKEN", None)
    return subprocess.run(
        ["bash", str(SMOKE), *args], capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env, check=False
    )


def verdicts(output: str) -> list[tuple[str, str]]:
    """(status, check) for each check the script reported; indented lines show a response."""
    lines = [line for line in output.splitlines() if not line.startswith(" ")]
    return [(line[:6].strip(), line[6:].split(":", 1)[0]) for line in lines]


def test_the_script_is_valid_bash() -> None:
    ran = subprocess.run(["bash", "-n", str(SMOKE)], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr


def test_a_signed_in_server_passes_every_check(dev_server: AnvilServer) -> None:
    ran = smoke(dev_server.url, dev_server.token("smoke-alice"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert verdicts(ran.stdout) == [
        ("ok", "health"),
        ("ok", "ready"),
        ("ok", "resource metadata"),
        ("ok", "no token"),
        ("ok", "2026-07-28 ask"),
        ("ok", "legacy ask"),
        ("ok", "conversation"),
    ]
    assert "turn 1 over 2026-07-28, turn 2 over 2025-11-25" in ran.stdout


def test_a_server_with_sign_in_off_passes_without_a_token(anon_server: AnvilServer) -> None:
    ran = smoke(anon_server.mcp_url)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert verdicts(ran.stdout) == [
        ("ok", "health"),
        ("ok", "ready"),
        ("skip", "resource metadata"),
        ("skip", "no token"),
        ("ok", "2026-07-28 ask"),
        ("ok", "legacy ask"),
        ("ok", "conversation"),
    ]
    assert "sign-in is off on this server (404)" in ran.stdout


def test_a_signed_in_server_without_a_token_fails_with_the_fix(dev_server: AnvilServer) -> None:
    ran = smoke(dev_server.url)
    assert ran.returncode == 1
    last = ran.stdout.splitlines()[-1]
    assert last.startswith("FAIL  no token: sign-in is on: pass an access token"), ran.stdout


def test_a_bad_token_fails_the_first_mcp_call(dev_server: AnvilServer) -> None:
    ran = smoke(dev_server.url, "not.a.token")
    assert ran.returncode == 1
    assert verdicts(ran.stdout)[-1] == ("FAIL", "2026-07-28 ask"), ran.stdout
    assert "HTTP 401" in ran.stdout


def test_nothing_listening_fails_at_once_with_a_clear_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    ran = smoke(url)
    assert ran.returncode == 1
    assert ran.stdout.startswith(f"FAIL  health: no answer from {url}/healthz: curl: (7)"), ran.stdout


def test_usage_is_exit_2() -> None:
    ran = smoke()
    assert ran.returncode == 2
    assert ran.stderr.startswith("usage: infra/smoke.sh URL [TOKEN]")


class ProbeHidingGateway:
    """A gateway stand-in in front of a server: `/healthz` and `/readyz` are 404 (as API
    Management answers for routes it does not publish), everything else is passed through."""

    HIDDEN = ("/healthz", "/readyz")

    def __init__(self) -> None:
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                gateway.forward(self, "GET")

            def do_POST(self) -> None:
                gateway.forward(self, "POST")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.upstream = ""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def forward(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        if handler.path.split("?")[0] in self.HIDDEN:
            body = b'{"statusCode": 404, "message": "Resource not found"}'
            status, headers = 404, {"content-type": "application/json"}
        else:
            length = int(handler.headers.get("content-length") or 0)
            sent = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "content-length")}
            reply = httpx.request(
                method,
                self.upstream + handler.path,
                headers=sent,
                content=handler.rfile.read(length),
                timeout=30,
            )
            body, status = reply.content, reply.status_code
            headers = {
                k: v for k, v in reply.headers.items() if k.lower() in ("content-type", "www-authenticate")
            }
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def __enter__(self) -> ProbeHidingGateway:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def test_behind_a_gateway_that_keeps_the_probes_private_they_are_skipped(tmp_path: Path) -> None:
    with ProbeHidingGateway() as gateway:
        # The server's public address is the gateway's, as in a deployment.
        env = {"ANVIL_ANSWER_ENGINE": "echo", "ANVIL_PUBLIC_URL": gateway.url}
        with run_anvil(tmp_path, env) as server:
            gateway.upstream = server.url
            ran = smoke(gateway.url, server.token("smoke-gateway"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert verdicts(ran.stdout)[:3] == [("skip", "health"), ("skip", "ready"), ("ok", "resource metadata")]
    assert [status for status, _ in verdicts(ran.stdout)[3:]] == ["ok"] * 4
    assert "not published here" in ran.stdout
