"""A local server that speaks the OpenAI Chat Completions wire protocol, for the model engines.

It serves both URL shapes the `openai` SDK uses: `POST /v1/chat/completions` (OpenAI and any
compatible endpoint) and `POST /openai/deployments/{deployment}/chat/completions?api-version=...`
(Azure OpenAI), answering with a JSON completion or, when the request says `"stream": true`, with
`text/event-stream` chunks ending in `data: [DONE]`, usage included when asked for.

What it answers is scripted: `script(...)` queues replies for the next requests; an unscripted
request gets `default_reply`, which cites the first numbered passage of the prompt, or says the
documentation does not cover the question when the prompt has none. Every request is recorded.
It runs on a real uvicorn server on a free loopback port, in a thread of the test process.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from support.anvil_server import free_port
from support.threaded_server import serving_in_thread

NOT_COVERED = "The documentation does not cover this."


@dataclass(frozen=True)
class Reply:
    """A completion: its text (streamed in `chunks` pieces when the request streams) and usage."""

    text: str
    prompt_tokens: int = 11
    completion_tokens: int = 7
    chunks: int = 4
    #: Streamed: send the first piece, then nothing more until the client goes away.
    hold: bool = False
    #: Answer only once this is set (or the server stops).
    release: threading.Event | None = None


@dataclass(frozen=True)
class Failure:
    """An HTTP error answer, e.g. 429 with `Retry-After`."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted failure"


@dataclass(frozen=True)
class Stall:
    """No answer until the server stops (the client's timeout must end the wait)."""


Behaviour = Reply | Failure | Stall


@dataclass
class Recorded:
    """One request as received."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.body["messages"]
        return messages

    @property
    def is_rewrite(self) -> bool:
        """Whether this is the engine's standalone-query request rather than an answer."""
        return "standalone search query" in self.messages[0]["content"]


def default_reply(request: Recorded) -> Reply:
    """Cite passage [1] when the prompt numbers any; a rewrite gets the question back, prefixed."""
    last = request.messages[-1]["content"]
    if request.is_rewrite:
        question = last.rsplit("Last question:", 1)[-1].strip()
        return Reply(f"standalone: {question}")
    if re.search(r"^\[1\] ", last, re.MULTILINE):
        return Reply("The documentation explains it [1].")
    return Reply(NOT_COVERED)


class FakeOpenAI:
    """The server's state: scripted behaviours, recorded requests, and the stop signal."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests: list[Recorded] = []
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        #: Set when a streamed answer's client went away before the end.
        self.disconnected = threading.Event()
        #: Set on every request received.
        self.arrived = threading.Event()
        #: Seconds every request waits before it is answered, as a slow model would; a callable
        #: is asked again for each request (e.g. a random delay).
        self.delay: float | Callable[[], float] = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *behaviours: Behaviour) -> None:
        """Answer the next requests with `behaviours`, in order; then go back to the default."""
        with self._lock:
            self._queue.extend(behaviours)

    def answers(self) -> list[Recorded]:
        """Recorded answer requests (not query rewrites), oldest first."""
        return [r for r in self.requests if not r.is_rewrite]

    def _next(self, request: Recorded) -> Behaviour:
        with self._lock:
            self.requests.append(request)
            self.arrived.set()
            return self._queue.popleft() if self._queue else default_reply(request)

    async def _chat(self, request: Request) -> Response:
        recorded = Recorded(
            path=request.url.path,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=await request.json(),
        )
        behaviour = self._next(recorded)
        delay = self.delay() if callable(self.delay) else self.delay
        if delay > 0:
            await anyio.sleep(delay)
        if isinstance(behaviour, Failure):
            error = {
                "error": {"message": behaviour.message, "type": "scripted", "code": str(behaviour.status)}
            }
            return JSONResponse(error, status_code=behaviour.status, headers=behaviour.headers)
        if isinstance(behaviour, Stall):
            await self._until_stopped()
            return JSONResponse({"error": {"message": "stopped"}}, status_code=503)
        if behaviour.release is not None:
            release = behaviour.release
            await anyio.to_thread.run_sync(self._until_set, release, abandon_on_cancel=True)
        model = recorded.body.get("model", "model")
        if recorded.body.get("stream"):
            include_usage = bool((recorded.body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                self._chunks(behaviour, model, include_usage), media_type="text/event-stream"
            )
        return JSONResponse(
            {
                "id": "chatcmpl-local",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": behaviour.text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": behaviour.prompt_tokens,
                    "completion_tokens": behaviour.completion_tokens,
                    "total_tokens": behaviour.prompt_tokens + behaviour.completion_tokens,
                },
            }
        )

    async def _chunks(self, reply: Reply, model: str, include_usage: bool) -> Any:
        def event(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> str:
            chunk: dict[str, Any] = {
                "id": "chatcmpl-local",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": choices,
            }
            if usage is not None:
                chunk["usage"] = usage
            return f"data: {json.dumps(chunk)}\n\n"

        size = max(1, -(-len(reply.text) // reply.chunks))
        pieces = [reply.text[i : i + size] for i in range(0, len(reply.text), size)]
        try:
            yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
            for piece in pieces:
                yield event([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
                if reply.hold:
                    await self._until_stopped()
            yield event([{"index": 0, "delta": {}, "finish_reason": "stop"}])
            if include_usage:
                usage = {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                }
                yield event([], usage)
            yield "data: [DONE]\n\n"
        except anyio.get_cancelled_exc_class():
            self.disconnected.set()
            raise

    def _until_set(self, release: threading.Event) -> None:
        """Block (in a worker thread) until `release` is set or the server stops."""
        while not release.wait(timeout=0.05) and not self.stopping.is_set():
            pass

    async def _until_stopped(self) -> None:
        """Wait for the server to stop; a client that goes away cancels the wait."""
        await anyio.to_thread.run_sync(self.stopping.wait, abandon_on_cancel=True)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/openai/deployments/{deployment}/chat/completions", self._chat, methods=["POST"]),
            ]
        )


@contextmanager
def running_openai() -> Iterator[FakeOpenAI]:
    """A started server; stopped (and its thread joined) on exit."""
    fake = FakeOpenAI()
    with serving_in_thread(fake.app(), fake.port, "the local OpenAI-protocol server"):
        try:
            yield fake
        finally:
            fake.stopping.set()
