"""HTTP/1.1 over raw sockets to a real `anvil serve` with short front-door limits: what a client
library would hide (a head sent a byte at a time, a body that never comes, bytes after a close).

`FRONT_DOOR_SOCKETS=1000` runs the crowd tests with a thousand sockets (200 by default).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from support.anvil_server import AnvilServer, run_anvil

HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
KEEP_ALIVE = 1
MAX_HEADER_BYTES = 16_384
MAX_CONCURRENT = 40
#: Scheduling on a loaded machine: how late past its deadline a connection may be closed.
SLACK = 3.0
CROWD = int(os.environ.get("FRONT_DOOR_SOCKETS", "200"))


@contextmanager
def front_door_server(folder: Path, *, fresh: bool = False, **overrides: str) -> Iterator[AnvilServer]:
    """An echo server with the limits above (and any `ANVIL_*` settings in `overrides`); `fresh` as
    for `run_anvil`."""
    env = {
        "ANVIL_ANSWER_ENGINE": "echo",
        "ANVIL_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "ANVIL_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "ANVIL_KEEP_ALIVE_SECONDS": str(KEEP_ALIVE),
        "ANVIL_MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
        "ANVIL_MAX_CONCURRENT_REQUESTS": str(MAX_CONCURRENT),
        **overrides,
    }
    with run_anvil(folder, env, fresh=fresh) as running:
        yield running


def port_of(server: AnvilServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def connect(server: AnvilServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port_of(server)), timeout=HEADER_TIMEOUT + 10)


class Reader:
    """Reads HTTP/1.1 responses (with a Content-Length) off a raw socket, one after another."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _more(self) -> bool:
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        self.buffer += chunk
        return bool(chunk)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            if not self._more():
                raise AssertionError(f"connection closed before a whole response: {self.buffer[:200]!r}")
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])
        }
        length = int(headers["content-length"])
        while len(rest) < length:
            if not self._more():
                raise AssertionError("connection closed inside a response body")
            rest = self.buffer.partition(b"\r\n\r\n")[2]
        self.buffer = rest[length:]
        return int(lines[0].split(" ", 2)[1]), headers, rest[:length]

    def head(self) -> bytes:
        """The next response head, whole (an interim `100 Continue` has nothing more)."""
        while b"\r\n\r\n" not in self.buffer:
            if not self._more():
                raise AssertionError(f"connection closed before a whole head: {self.buffer[:200]!r}")
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def closed(self) -> bool:
        """Whether the server closed the connection (after what is already buffered)."""
        return not self._more()


def request(
    path: str, *, headers: dict[str, str] | None = None, body: bytes = b"", method: str = "GET"
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def ask(server: AnvilServer, question: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/ask",
        json={"question": question},
        headers={"Authorization": f"Bearer {server.token('alice')}"},
        timeout=HEADER_TIMEOUT + 10,
    )


def ask_head(server: AnvilServer, *, length: int, token: bool = True, expect: bool = False) -> bytes:
    """The head of a POST /api/ask whose body is `length` bytes."""
    lines = ["POST /api/ask HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}")
    if token:
        lines.append(f"Authorization: Bearer {server.token('alice')}")
    if expect:
        lines.append("Expect: 100-continue")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def wait_closed(sock: socket.socket, dribble: bytes | None = None) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed; `dribble` is sent every
    quarter second meanwhile, as a slow client would."""
    sock.setblocking(False)
    received = b""
    give_up = time.monotonic() + HEADER_TIMEOUT + KEEP_ALIVE + SLACK + 5
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        while time.monotonic() < give_up:
            if dribble is not None:
                try:
                    sock.send(dribble)
                except OSError:
                    dribble = None  # the server has stopped reading: it is closing
            if selector.select(timeout=0.25):
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if not chunk:
                    return received, time.monotonic()
                received += chunk
    raise AssertionError(f"the server did not close the connection; it sent {received[:200]!r}")


def status_of(response: bytes) -> int:
    assert response.startswith(b"HTTP/1.1 "), response[:100]
    return int(response.split(b" ", 2)[1])


def problem_of(response: bytes) -> dict[str, object]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert re.search(rb"(?im)^connection: close\r?$", head)
    document: dict[str, object] = json.loads(body)
    return document
