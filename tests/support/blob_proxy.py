"""A TCP proxy in front of Azurite that can play a storage outage: it passes requests on, cuts the
ones it is told to (the connection closed before any answer), or holds them without ever
answering.

Each request gets a connection of its own (the proxy asks the server to close it after its
answer), so every request is seen, and a change of mode applies from the next one on.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

#: What the proxy does with a request: pass it on, close its connection, or never answer it.
PASS, CUT, HOLD = "pass", "cut", "hold"


@dataclass
class BlobProxy:
    """The proxy's address, what it does with each method (`modes`, default `PASS`), and what it
    has seen."""

    port: int
    upstream: int
    modes: dict[str, str] = field(default_factory=dict)
    #: Requests seen, by (method, what was done).
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: Set when a request is held.
    holding: threading.Event = field(default_factory=threading.Event)
    #: Set at every request: a test waits for the next one.
    requested: threading.Condition = field(default_factory=threading.Condition)

    def url(self, account: str, container: str, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{account}/{container}/{name}"

    def set(self, method: str, mode: str) -> None:
        self.modes[method] = mode

    def wait_for(self, method: str, mode: str, count: int = 1, timeout: float = 60) -> None:
        """Wait until `count` requests of `method` have been met with `mode`."""
        with self.requested:
            if not self.requested.wait_for(lambda: self.seen[(method, mode)] >= count, timeout):
                raise TimeoutError(f"{count} {method} requests were not {mode} in {timeout} s: {self.seen}")


def _read_head(client: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data


def _closing(head: bytes) -> bytes:
    """`head` asking the server to close the connection after its answer."""
    top, _, rest = head.partition(b"\r\n\r\n")
    lines = [line for line in top.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + rest


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def blob_proxy(upstream: int) -> Iterator[BlobProxy]:
    """A proxy to 127.0.0.1:`upstream`, closed (with every connection) on leaving."""
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = BlobProxy(listener.getsockname()[1], upstream)
    sockets: list[socket.socket] = [listener]
    threads: list[threading.Thread] = []

    def serve(client: socket.socket) -> None:
        head = _read_head(client)
        if head is None:
            return
        method = head.split(b" ", 1)[0].decode()
        mode = proxy.modes.get(method, PASS)
        with proxy.requested:
            proxy.seen[(method, mode)] += 1
            proxy.requested.notify_all()
        if mode == CUT:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
            client.close()
            return
        if mode == HOLD:
            proxy.holding.set()
            return  # open, unanswered, until the proxy closes
        server = socket.create_connection(("127.0.0.1", proxy.upstream))
        sockets.append(server)
        server.sendall(_closing(head))
        back = threading.Thread(target=_pump, args=(server, client), daemon=True)
        back.start()
        threads.append(back)
        _pump(client, server)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            sockets.append(client)
            worker = threading.Thread(target=serve, args=(client,), daemon=True)
            worker.start()
            threads.append(worker)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield proxy
    finally:
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        acceptor.join(timeout=10)
        for thread in threads:
            thread.join(timeout=10)
