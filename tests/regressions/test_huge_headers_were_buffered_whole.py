"""Request headers had no size limit: one 50 MB header was read whole before it was answered
401, and four unfinished 30 MB headers took the process from 121 to 301 MB until their sockets
closed. Fixed in 0.4.2 (431 after reading at most `ANVIL_MAX_HEADER_BYTES`)."""

from __future__ import annotations

import re
import socket
import threading
from contextlib import ExitStack, suppress
from pathlib import Path

import pytest
from support.anvil_server import AnvilServer
from support.raw_http import MAX_HEADER_BYTES, Reader, connect, problem_of, status_of, wait_closed


def test_a_head_of_the_limit_is_served_and_one_unfinished_at_the_limit_gets_431(
    front_door: AnvilServer,
) -> None:
    start = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
    whole = start + b"a" * (MAX_HEADER_BYTES - len(start) - 4) + b"\r\n\r\n"
    assert len(whole) == MAX_HEADER_BYTES
    with connect(front_door) as sock:
        sock.sendall(whole)
        assert Reader(sock).response()[0] == 200
    with connect(front_door) as sock:
        # Exactly the limit, not finished: refused without waiting for (or reading) one byte more.
        sock.sendall(start + b"a" * (MAX_HEADER_BYTES - len(start)))
        response, _ = wait_closed(sock)
    assert status_of(response) == 431
    problem = problem_of(response)
    assert problem["title"] == "Request Header Fields Too Large"
    assert f"larger than {MAX_HEADER_BYTES} bytes" in str(problem["detail"])


def test_a_2_mb_header_gets_431(front_door: AnvilServer) -> None:
    with connect(front_door) as sock:
        # The server may close before it has all: it answered first.
        with suppress(OSError):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 2_000_000)
        response, _ = wait_closed(sock)
    assert status_of(response) == 431


def rss_bytes(server: AnvilServer) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    assert match is not None
    return int(match.group(1)) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's memory from /proc")
def test_unfinished_30_mb_headers_are_not_buffered(front_door: AnvilServer) -> None:
    before = rss_bytes(front_door)
    header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 30_000_000
    with ExitStack() as stack:
        socks = [stack.enter_context(connect(front_door)) for _ in range(4)]

        def send(sock: socket.socket) -> None:
            with suppress(OSError):  # refused and closed before the whole header was sent
                sock.sendall(header)

        senders = [threading.Thread(target=send, args=(sock,)) for sock in socks]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        # All four sockets are still open here; holding their headers would take 120 MB.
        assert rss_bytes(front_door) - before < 20_000_000
        assert [status_of(wait_closed(sock)[0]) for sock in socks] == [431] * 4
