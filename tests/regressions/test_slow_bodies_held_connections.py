"""A request's body was read before sign-in and with no deadline: clients without a token that
sent the headers of a large POST and then trickled its body held their connections as long as
they liked. Fixed in 0.3.0 (sign-in from the headers, then the body within
`ANVIL_BODY_TIMEOUT_SECONDS`, 408).

Each client here opens a raw socket and sends the headers of a 60 KB POST but only the start of
its body, as a trickling client would.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil

DECLARED = 60_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    env = {"ANVIL_ANSWER_ENGINE": "echo", "ANVIL_BODY_TIMEOUT_SECONDS": "1"}
    with run_anvil(tmp_path_factory.mktemp("slow"), env) as running:
        yield running


def half_sent(server: AnvilServer, path: str, token: str | None) -> socket.socket:
    """A connection that sent the headers and 100 bytes of a 60 KB JSON body, then nothing."""
    port = int(server.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {DECLARED}",
    ]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + b'{"question": "' + b"x" * 86)
    return sock


def status_of(sock: socket.socket) -> int:
    """The status code of the response on `sock` (waits for it, up to the socket's timeout)."""
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError(f"connection closed without a response: {head!r}")
        head += chunk
    return int(head.split(b" ", 2)[1])


@pytest.mark.parametrize("path", ["/mcp", "/api/ask"])
def test_tokenless_half_sent_bodies_are_refused_at_once_while_signed_in_requests_stay_fast(
    server: AnvilServer, path: str
) -> None:
    with ExitStack() as stack:
        clients = [stack.enter_context(half_sent(server, path, None)) for _ in range(48)]
        # Every one is answered from its headers; none waits for the rest of its body.
        assert [status_of(sock) for sock in clients] == [401] * len(clients)
        started = time.monotonic()
        response = httpx.post(
            f"{server.url}/api/ask",
            json={"question": "still served?"},
            headers={"Authorization": f"Bearer {server.token('alice')}"},
        )
        assert response.status_code == 200
        assert response.json()["answer"] == "Echo: still served?"
        # Far below the body deadline: nothing queued behind the trickling clients.
        assert time.monotonic() - started < 1.0


def test_a_signed_in_body_that_does_not_arrive_in_time_gets_408(server: AnvilServer) -> None:
    with half_sent(server, "/api/ask", server.token("alice")) as sock:
        assert status_of(sock) == 408
