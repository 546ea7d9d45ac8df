"""A local HTTP server answering every request with canned responses, by path, for client tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Canned:
    """An answer: status, headers and a body (a dict is sent as JSON)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class CannedServer:
    url: str
    answers: dict[str, Canned]
    #: Each request as (method, path, headers, body).
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)


@contextmanager
def canned_server(answers: dict[str, Canned] | None = None) -> Iterator[CannedServer]:
    """Serve `answers` (by path; 404 for any other) on 127.0.0.1 at a free port until the block ends."""
    served = CannedServer("", dict(answers or {}))

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            served.requests.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
            canned = served.answers.get(self.path.split("?")[0], Canned(404, {"title": "Not Found"}))
            body = canned.body
            data = json.dumps(body).encode() if isinstance(body, dict | list) else (body or b"")
            self.send_response(canned.status)
            headers = (
                {"Content-Type": "application/json", **canned.headers}
                if isinstance(body, dict)
                else canned.headers
            )
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
