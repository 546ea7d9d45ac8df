"""A `POST /mcp` body is read from the server's `receive` once: `BodyGuard` reads it and keeps it,
the MCP endpoint takes it from there, and the SDK's transport gets `BodyGuard`'s replay of it,
the only second reader (its public API takes nothing but ASGI)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import FastAPI
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send
from support.asgi import WithState, post_scope, started

from app.http.received import BODY
from app.main import create_app
from app.mcp_server.server import McpEndpoint
from app.settings import Settings

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
SSE = b"application/json, text/event-stream"


@pytest.fixture
async def anvil(tmp_path: Path) -> AsyncIterator[WithState]:
    settings = Settings(auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path)
    app: FastAPI = create_app(settings)
    async with started(app) as running:
        yield running


def ask(*, modern: bool, progress: bool) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """A `tools/call` of `ask` and its headers, in either era, with or without a progressToken."""
    meta: dict[str, Any] = {"progressToken": 7} if progress else {}
    headers = [(b"host", b"127.0.0.1:8000"), (b"accept", SSE), (b"content-type", b"application/json")]
    if modern:
        meta["io.modelcontextprotocol/protocolVersion"] = MODERN
        meta["io.modelcontextprotocol/clientCapabilities"] = {}
        headers += [(b"mcp-protocol-version", MODERN.encode()), (b"mcp-method", b"tools/call")]
        headers.append((b"mcp-name", b"ask"))
    params = {"name": "ask", "arguments": {"question": "What is Anvil?"}, "_meta": meta}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return json.dumps(request).encode(), headers


class Server:
    """The server's side of one request: a `receive` that counts what it is asked for, and a
    `send` that collects the response. After the body, `receive` answers only once the response
    is complete, with the disconnect (as a server does for a client that waits for its answer)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.handed_out: list[str] = []
        self.sent: list[Message] = []
        self.answered = anyio.Event()

    async def receive(self) -> Message:
        if not self.handed_out:
            self.handed_out.append("http.request")
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.answered.wait()
        self.handed_out.append("http.disconnect")
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered.set()

    def reply(self) -> tuple[int, bytes]:
        status = next(m["status"] for m in self.sent if m["type"] == "http.response.start")
        return status, b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


@pytest.mark.parametrize("modern", [False, True], ids=["handshake era", "2026-07-28"])
async def test_a_call_answered_as_json_asks_receive_once(anvil: WithState, modern: bool) -> None:
    body, headers = ask(modern=modern, progress=False)
    server = Server(body)
    await anvil(post_scope(headers), server.receive, server.send)
    status, reply = server.reply()
    assert status == 200 and b"Echo: What is Anvil?" in reply
    assert server.handed_out == ["http.request"]


@pytest.mark.parametrize("modern", [False, True], ids=["handshake era", "2026-07-28"])
async def test_a_call_answered_as_a_stream_reads_its_body_once(anvil: WithState, modern: bool) -> None:
    # The streaming manager also listens for the client leaving: those calls get no body.
    body, headers = ask(modern=modern, progress=True)
    server = Server(body)
    await anvil(post_scope(headers), server.receive, server.send)
    status, reply = server.reply()
    assert status == 200 and b"Echo: What is Anvil?" in reply
    assert server.handed_out.count("http.request") == 1
    assert set(server.handed_out[1:]) <= {"http.disconnect"}


async def test_the_endpoint_reads_the_kept_body_and_hands_the_sdk_receive_untouched() -> None:
    body, headers = ask(modern=False, progress=False)
    server = Server(body)
    got: list[Receive] = []

    async def manager(scope: Scope, receive: Receive, send: Send) -> None:
        got.append(receive)
        await JSONResponse({"served": True})(scope, receive, send)

    scope = post_scope(headers)
    scope[BODY] = body
    await McpEndpoint(manager, manager)(scope, server.receive, server.send)
    assert server.reply()[0] == 200
    assert got == [server.receive]
    assert server.handed_out == []
