"""A stand-in's ASGI app on a real uvicorn server on a loopback port, in a thread of the test
process: what the OpenAI-protocol server, the embeddings stand-in and the telemetry receivers
run on."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


class _Server(uvicorn.Server):
    """A uvicorn server that says when its start-up is over, whether it then listens or not."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.starting_over = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.starting_over.set()

    def run_to_the_end(self) -> None:
        try:
            self.run()
        finally:
            # A server that fails before its start-up (an app that cannot load) ends here.
            self.starting_over.set()


@contextmanager
def serving_in_thread(
    app: Any, port: int, what: str, *, stop_at_once: bool = False, **options: Any
) -> Iterator[uvicorn.Server]:
    """Serve `app` on 127.0.0.1:`port` (with uvicorn `options`, such as TLS files) until exit,
    then stop the server and join its thread. `RuntimeError` naming `what` if it does not start.

    With `stop_at_once`, the server is stopped without waiting for its connections to close.
    """
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", **options)
    server = _Server(config)
    thread = threading.Thread(target=server.run_to_the_end, daemon=True)
    thread.start()
    if not server.starting_over.wait(timeout=30) or not server.started:
        server.should_exit = True
        raise RuntimeError(f"{what} did not start")
    try:
        yield server
    finally:
        server.should_exit = True
        server.force_exit = stop_at_once
        thread.join(timeout=30)
