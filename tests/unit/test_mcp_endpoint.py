"""The single-exchange path for handshake-era calls answers exactly as the SDK's own path does.

Two Anvils side by side, one with `ANVIL_MCP_SINGLE_EXCHANGE` on and one with it off, get the
same requests; their answers must match in status, content type and bytes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.asgi import client

import app.api.single_exchange
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"
Headers = dict[str, str] | list[tuple[str, str]]


@pytest.fixture
async def fast(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path)
    async with client(create_app(settings)) as http:
        yield http


@pytest.fixture
async def sdk(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path, mcp_single_exchange=False
    )
    async with client(create_app(settings)) as http:
        yield http


@pytest.fixture
def served_single(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The methods the single-exchange path served, in order."""
    served: list[str] = []
    original = app.api.single_exchange.serve_one

    async def spy(server: Any, context: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        served.append(method)
        return await original(server, context, method, *args, **kwargs)

    monkeypatch.setattr(app.api.single_exchange, "serve_one", spy)
    return served


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


REQUESTS = {
    "tools/list": {"jsonrpc": "2.0", "id": "list-1", "method": "tools/list"},
    "tools/list with params": {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
    "ask one-shot": call("ask", {"question": "same either way?"}),
    "ask in other scripts": call("ask", {"question": "Grüße — 日本語で? \U0001f600"}),
    "ask with an ignored id": call("ask", {"question": "q", "conversationId": "abc"}),
    "ask with a bad id": call("ask", {"question": "q", "conversationId": "not valid!"}),
    "ask without a question": call("ask", {}),
    "ask with arguments of the wrong type": call("ask", {"question": 42}),
    "search": call("search", {"searchText": "anything", "maxResults": 3}),
    "search with maxResults out of range": call("search", {"searchText": "x", "maxResults": 500}),
    "unknown tool": call("no_such_tool", {}),
    "start_conversation anonymously": call("start_conversation", {}),
}


async def exchange(http: httpx.AsyncClient, body: Any, headers: Headers) -> httpx.Response:
    """POST `body` to /mcp (with JSON and SSE accepted unless `headers` say otherwise); a list
    of header pairs may name one header twice."""
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers)
    named = {name.lower() for name, _ in pairs}
    pairs += [
        (k, v)
        for k, v in (("Accept", ACCEPT), ("Content-Type", "application/json"))
        if k.lower() not in named
    ]
    response = await http.post("/mcp", content=json.dumps(body), headers=pairs)
    if response.content:
        assert response.headers["content-length"] == str(len(response.content))
    return response


async def both_paths(fast: httpx.AsyncClient, sdk: httpx.AsyncClient, body: Any, headers: Headers) -> None:
    """The single-exchange path and the SDK's own path answer alike: status, type and bytes."""
    answers = []
    for http in (fast, sdk):
        response = await exchange(http, body, headers)
        answers.append((response.status_code, response.headers.get("content-type"), response.text))
    assert answers[0] == answers[1], f"single exchange: {answers[0]}\nsdk: {answers[1]}"


@pytest.mark.parametrize("version", [None, "2025-03-26", "2025-06-18", "2025-11-25"])
@pytest.mark.parametrize("case", sorted(REQUESTS))
async def test_single_exchange_answers_like_the_sdk_session_path(
    fast: httpx.AsyncClient, sdk: httpx.AsyncClient, served_single: list[str], case: str, version: str | None
) -> None:
    await both_paths(fast, sdk, REQUESTS[case], {"MCP-Protocol-Version": version} if version else {})
    assert served_single == [REQUESTS[case]["method"]]


OTHER_REQUESTS: dict[str, tuple[Any, Headers]] = {
    "initialize": (
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {},
    ),
    "a notification": ({"jsonrpc": "2.0", "method": "notifications/initialized"}, {}),
    "a batch": ([call("ask", {"question": "q"})], {}),
    "a boolean id": ({**call("ask", {"question": "q"}), "id": True}, {}),
    "an extra envelope member": ({**call("ask", {"question": "q"}), "extra": 1}, {}),
    "params that are a list": ({**call("ask", {"question": "q"}), "params": [1]}, {}),
    "JSON not accepted": (call("ask", {"question": "q"}), {"Accept": "text/event-stream"}),
    "not JSON": (call("ask", {"question": "q"}), {"Content-Type": "text/plain"}),
    "2026-07-28": (call("ask", {"question": "q"}), {"MCP-Protocol-Version": "2026-07-28"}),
}


@pytest.mark.parametrize("case", sorted(OTHER_REQUESTS))
async def test_anything_else_goes_to_the_sdk_and_answers_the_same(
    fast: httpx.AsyncClient, sdk: httpx.AsyncClient, served_single: list[str], case: str
) -> None:
    await both_paths(fast, sdk, *OTHER_REQUESTS[case])
    assert served_single == []


async def test_the_first_of_repeated_content_types_decides_on_both_paths(
    fast: httpx.AsyncClient, sdk: httpx.AsyncClient
) -> None:
    pairs = [("Content-Type", "text/plain"), ("Content-Type", "application/json")]
    await both_paths(fast, sdk, REQUESTS["ask one-shot"], pairs)
