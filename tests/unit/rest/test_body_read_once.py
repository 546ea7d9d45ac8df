"""A REST route takes its JSON body from what `BodyGuard` read and kept: the body is read from
the server's `receive` once and decoded once, by the route."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send
from support.asgi import started
from support.decoders import of_anvil, record_callers

from app.auth.dev import DevIssuer
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio


@pytest.fixture
def handed_out() -> list[str]:
    """Every message the server's `receive` hands out from now on: a piece of the body and
    whether more follows, or the message's type."""
    return []


def kind(message: Message) -> str:
    if message["type"] != "http.request":
        return str(message["type"])
    return "more body" if message.get("more_body", False) else "last body"


@pytest.fixture
async def http(tmp_path: Path, handed_out: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(auth_mode="dev", store="memory", answer_engine="echo", data_dir=tmp_path)
    token = DevIssuer.load_or_create(tmp_path).mint("alice")
    async with started(create_app(settings)) as running:

        async def server(scope: Scope, receive: Receive, send: Send) -> None:
            async def counted() -> Message:
                message = await receive()
                handed_out.append(kind(message))
                return message

            await running(scope, counted, send)

        transport = httpx.ASGITransport(app=server)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
            http.headers["Authorization"] = f"Bearer {token}"
            yield http


@pytest.fixture
def decoders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Who calls `json.loads` from now on (sign-in's token decoding too)."""
    return record_callers(monkeypatch, (json, "loads"))


async def test_a_post_body_is_read_once_and_decoded_once(
    http: httpx.AsyncClient, handed_out: list[str], decoders: list[str]
) -> None:
    reply = await http.post("/api/ask", content=json.dumps({"question": "What is Anvil?"}).encode())
    # The client sends the body in pieces; each is asked for once, and nothing after the last.
    assert handed_out[-1] == "last body" and set(handed_out[:-1]) <= {"more body"}
    assert of_anvil(decoders) == ["app.http.json_text"]
    assert reply.status_code == 200 and reply.json()["answer"].startswith("Echo: What is Anvil?")
