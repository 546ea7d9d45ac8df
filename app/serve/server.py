"""`anvil serve`: Anvil on uvicorn, behind the front door, with its limits and a drain on stop.

`serve(settings)` takes its address first (`listening_socket`: a port in use fails in a second,
with one line saying what to pass instead, not after the index is built), builds the app
(`app.main.create_app`) and runs it until SIGTERM or SIGINT; `server_for` is the uvicorn server it
runs, on its own so its settings can be checked. "Anvil ready" is said once the app has started
and its socket is being served, never before. A stop signal always ends the process: within
`ANVIL_DRAIN_SECONDS` plus `STOP_GRACE_SECONDS`, even when something it waits for never returns.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
import socket
import threading
from typing import Any

import uvicorn
from fastapi import FastAPI

from app.main import create_app
from app.serve.frontdoor import Limits, front_door
from app.settings import Settings
from app.settings.serve import HttpLimits, ServeSettings
from app.settings.telemetry import LogLevel
from app.telemetry.logs import configure_logging

#: Young-generation threshold for `anvil serve`. A young collection walks every young object
#: still alive, and under load that includes each in-flight request's objects: the default 700
#: collects very often, and 50,000 let them pile up into 15-60 ms pauses every couple of seconds
#: (the p99 tail); 2,000 kept each pause to about a millisecond for the same or less CPU.
GC_THRESHOLDS = (2_000, 20, 100)
#: Exit status when the server did not start (its address is taken, or its lifespan failed: bad
#: corpus, unreadable key, ...).
EXIT_NOT_STARTED = 3
#: How many connections may wait to be accepted (uvicorn's own default).
BACKLOG = 2048
#: After a stop signal, the drain (`ANVIL_DRAIN_SECONDS`) and then at most this long for the rest of
#: the shutdown (closing the store, the index): a call that never returns (a start-up waiting on
#: storage that does not answer) does not keep the process from ending.
STOP_GRACE_SECONDS = 5.0
#: Exit status when the process was ended that way, past its drain and grace.
EXIT_STOPPED_LATE = 1

logger = logging.getLogger("app.serve")


class CannotListen(Exception):
    """The address cannot be listened on; the message names it and what to pass instead."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` and listening; `CannotListen` saying why not and what to
    change."""
    where = f"{f'[{host}]' if ':' in host else host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror:
        raise CannotListen(
            f"cannot listen on {where}: {host!r} is not an address of this machine; pass --host "
            "(or set ANVIL_HOST) with one it has, such as 127.0.0.1"
        ) from None
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(BACKLOG)
    except OSError as error:
        listener.close()
        if error.errno == errno.EADDRINUSE:
            reason = (
                f"port {port} is already in use (is another Anvil running?); pass --port (or set "
                "ANVIL_PORT) with a free one"
            )
        elif error.errno == errno.EACCES:
            reason = (
                f"this user may not listen on port {port} (ports below 1024 need privileges); pass "
                "--port (or set ANVIL_PORT) with one from 1024 up"
            )
        elif error.errno == errno.EADDRNOTAVAIL:
            reason = (
                f"{host} is not an address of this machine; pass --host (or set ANVIL_HOST) with one it has"
            )
        else:
            reason = f"{error.strerror or error}; pass another --host or --port"
        raise CannotListen(f"cannot listen on {where}: {reason}") from None
    return listener


def settle_heap() -> None:
    """Keep start-up objects (modules, schemas, the index) out of every future collection.

    They live as long as the process, so scanning them again and again only adds pauses. (No
    collection first: it would cost tens of milliseconds of start-up for a few kilobytes.)
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()


class _Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, api: FastAPI, ready: str | None, stop_within: float | None
    ) -> None:
        super().__init__(config)
        self._api = api
        self._ready = ready
        self._stop_within = stop_within
        self._deadline: threading.Timer | None = None

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started and self._ready:
            logger.info("%s", self._ready)
        settle_heap()

    def handle_exit(self, sig: int, frame: Any) -> None:
        # Readiness fails from the first signal on, while requests in flight finish.
        self._api.state.draining = True
        if self._deadline is None and self._stop_within is not None:
            self._deadline = threading.Timer(self._stop_within, _stop_now, args=(self._stop_within,))
            self._deadline.daemon = True
            self._deadline.start()
        super().handle_exit(sig, frame)


def _stop_now(limit: float) -> None:
    """The process's end, `limit` seconds after the first stop signal, whatever still runs."""
    logger.error(
        "Anvil did not stop within %.0f s of the stop signal (ANVIL_DRAIN_SECONDS, then %.0f s for "
        "the rest): a call that does not return holds it; exiting now",
        limit,
        STOP_GRACE_SECONDS,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(EXIT_STOPPED_LATE)


def server_for(
    api: FastAPI,
    *,
    bind: ServeSettings,
    limits: HttpLimits,
    log_level: LogLevel,
    ready: str | None = None,
    own_process: bool = False,
) -> uvicorn.Server:
    """The uvicorn server for `api`: bound as `bind` says, behind the front door with `limits`,
    its readiness failing from the first stop signal on, and the heap settled once it has started
    (when it logs `ready`). With `own_process` (the process is the server's alone), the process
    ends at the latest `STOP_GRACE_SECONDS` after its drain, once a stop signal has come."""
    config = uvicorn.Config(
        api,
        host=bind.host,
        port=bind.port,
        lifespan="on",
        log_level=log_level,
        # uvicorn's loggers propagate to the root handler `configure_logging` set up (JSON lines).
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        # uvicorn has no deadline or size limit for request heads, nor a deadline for bodies: the
        # front door adds them, and keeps connections that have not sent a whole request out of
        # `limit_concurrency`.
        http=front_door(
            Limits(
                header_timeout=limits.header_timeout_seconds,
                max_header_bytes=limits.max_header_bytes,
                body_timeout=limits.body_timeout_seconds,
                draining=lambda: bool(getattr(api.state, "draining", False)),
            )
        ),
        timeout_keep_alive=limits.keep_alive_seconds,
        limit_concurrency=limits.max_concurrent_requests,
        timeout_graceful_shutdown=limits.drain_seconds,
    )
    return _Server(config, api, ready, limits.drain_seconds + STOP_GRACE_SECONDS if own_process else None)


def serve(settings: Settings) -> int:
    """Run Anvil until a stop signal; the exit status: 0 once drained, `EXIT_NOT_STARTED` when it
    never started. Raises `TelemetryError` when the telemetry settings cannot be used.

    Call it with the garbage collector disabled (`gc.disable()`) from before the first import of
    the app: start-up creates objects that live as long as the process and almost no garbage, and
    collecting while they pile up scans them again and again (about 100 ms of a cold start).
    Collection comes back on, tuned, once the server has started (`settle_heap`).
    """
    configure_logging(settings)
    try:
        listener = listening_socket(settings.host, settings.port)
    except CannotListen as error:
        logger.error("Anvil cannot start: %s", error)
        return EXIT_NOT_STARTED
    ready = (
        f"Anvil ready on {settings.base_url}: store={settings.store} engine={settings.answer_engine} "
        f"auth={settings.auth_mode}"
    )
    with listener:
        server = server_for(
            create_app(settings),
            bind=settings,
            limits=settings,
            log_level=settings.log_level,
            ready=ready,
            own_process=True,
        )
        # uvicorn raises the stop signal again once it has drained, for the handler that was there
        # before it: a no-op here, so that a requested stop is a clean exit (status 0).
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, lambda *_: None)
        server.run(sockets=[listener])
    # uvicorn leaves `started` False when the lifespan failed.
    return 0 if server.started else EXIT_NOT_STARTED
