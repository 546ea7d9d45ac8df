"""The single-exchange path for handshake-era calls answers exactly as the SDK's own path does.

Two Anvils side by side, one with `ANVIL_MCP_SINGLE_EXCHANGE` on and one with it off, get the
same requests; their answers must match in status, content type and bytes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.datastructures import Headers as StarletteHeaders
from support.asgi import client

import app.mcp_server.single_exchange
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"
Headers = dict[str, str] | list[tuple[str, str]]


@asynccontextmanager
async def anvil(tmp_path: Path, single_exchange: bool) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        auth_mode="none",
        store="memory",
        answer_engine="echo",
        data_dir=tmp_path,
        mcp_single_exchange=single_exchange,
    )
    async with client(create_app(settings)) as http:
        yield http


@pytest.fixture
async def fast(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with anvil(tmp_path / "fast", single_exchange=True) as http:
        yield http


@pytest.fixture
async def sdk(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with anvil(tmp_path / "sdk", single_exchange=False) as http:
        yield http


@pytest.fixture
def served_single(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The methods the single-exchange path served, in order."""
    served: list[str] = []
    original = app.mcp_server.single_exchange.serve_one

    async def spy(server: Any, context: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        served.append(method)
        return await original(server, context, method, *args, **kwargs)

    monkeypatch.setattr(app.mcp_server.single_exchange, "serve_one", spy)
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


MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def modern(request: dict[str, Any], **meta: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """`request` in the 2026-07-28 shape: the envelope in `_meta`, the routing headers to match."""
    params = {**request.get("params", {}), "_meta": {**ENVELOPE, **meta}}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": request["method"]}
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    return {**request, "params": params}, headers


PLAIN_MODERN: dict[str, tuple[Any, Headers]] = {name: modern(request) for name, request in REQUESTS.items()}
_WITH_TOKEN, _WITH_TOKEN_HEADERS = modern(
    call("ask", {"question": "q"}),
    **{"io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}},
    progressToken="p-1",
)
# A client that reads SSE gets its progress on a stream, from the SDK; one that reads only JSON
# gets no progress, and the plain answer.
PLAIN_MODERN["with client info and a progress token, JSON only"] = (
    _WITH_TOKEN,
    {**_WITH_TOKEN_HEADERS, "Accept": "application/json"},
)
ASK, ASK_HEADERS = modern(call("ask", {"question": "q"}))
PLAIN_MODERN["another header twice"] = (ASK, [*ASK_HEADERS.items(), ("X-Trace", "1"), ("X-Trace", "2")])
PLAIN_MODERN["wildcard accept"] = (ASK, {**ASK_HEADERS, "Accept": "*/*"})

UNUSUAL_MODERN: dict[str, tuple[Any, Headers]] = {
    "without the envelope": ({**ASK, "params": {"name": "ask", "arguments": {}}}, ASK_HEADERS),
    "Mcp-Method disagrees": (ASK, {**ASK_HEADERS, "Mcp-Method": "tools/list"}),
    "Mcp-Name disagrees": (ASK, {**ASK_HEADERS, "Mcp-Name": "search"}),
    "Mcp-Name missing": (ASK, {k: v for k, v in ASK_HEADERS.items() if k != "Mcp-Name"}),
    "envelope names another version": (
        {
            **ASK,
            "params": {
                **ASK["params"],
                "_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2025-06-18"},
            },
        },
        ASK_HEADERS,
    ),
    "routing header twice": (ASK, [*ASK_HEADERS.items(), ("Mcp-Method", "tools/call")]),
    "an Mcp-Param header": (ASK, {**ASK_HEADERS, "Mcp-Param-Question": "q"}),
    "a boolean id": ({**ASK, "id": True}, ASK_HEADERS),
    "a null id": ({**ASK, "id": None}, ASK_HEADERS),
    "an extra envelope member": ({**ASK, "extra": 1}, ASK_HEADERS),
    "a notification": ({k: v for k, v in ASK.items() if k != "id"}, ASK_HEADERS),
    "a batch": ([ASK], ASK_HEADERS),
    "params that are a list": ({**ASK, "params": [1]}, ASK_HEADERS),
    "initialize": modern({"jsonrpc": "2.0", "id": 9, "method": "initialize"}),
    "server/discover": modern({"jsonrpc": "2.0", "id": 9, "method": "server/discover"}),
    "JSON not accepted": (ASK, {**ASK_HEADERS, "Accept": "text/event-stream"}),
    "not JSON": (ASK, {**ASK_HEADERS, "Content-Type": "text/plain"}),
}


@pytest.mark.parametrize("case", sorted(PLAIN_MODERN))
async def test_2026_07_28_single_exchange_answers_like_the_sdk(
    fast: httpx.AsyncClient, sdk: httpx.AsyncClient, served_single: list[str], case: str
) -> None:
    body, headers = PLAIN_MODERN[case]
    await both_paths(fast, sdk, body, headers)
    assert served_single == [body["method"]]


@pytest.mark.parametrize("case", sorted(UNUSUAL_MODERN))
async def test_unusual_2026_07_28_requests_go_to_the_sdk_and_answer_the_same(
    fast: httpx.AsyncClient, sdk: httpx.AsyncClient, served_single: list[str], case: str
) -> None:
    await both_paths(fast, sdk, *UNUSUAL_MODERN[case])
    assert served_single == []


async def test_a_tool_declaring_param_headers_is_left_to_the_sdk(tmp_path: Path) -> None:
    from app.mcp_server.server import build_mcp_server
    from app.mcp_server.single_exchange import SingleExchange

    settings = Settings(auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path)
    server = build_mcp_server(settings)
    declared = {"type": "object", "properties": {"q": {"type": "string", "x-mcp-header": "Q"}}}
    server.get_tool_input_schema = {"ask": declared}.get
    fast = SingleExchange(server, fallback=server.streamable_http_app())
    assert fast._modern_route(StarletteHeaders(headers=ASK_HEADERS), ASK) is None
    search, search_headers = modern(call("search", {"searchText": "x"}))
    assert fast._modern_route(StarletteHeaders(headers=search_headers), search) is not None


async def test_the_request_context_offers_a_cancellation_event_that_is_never_set() -> None:
    import anyio
    from mcp.shared.message import ServerMessageMetadata
    from mcp.shared.transport_context import TransportContext

    from app.mcp_server.single_exchange import RequestContext

    context = RequestContext(
        transport=TransportContext(kind="streamable-http", can_send_request=False),
        request_id=1,
        message_metadata=ServerMessageMetadata(),
    )
    event = context.cancel_requested
    assert isinstance(event, anyio.Event) and not event.is_set()
    assert context.cancel_requested is event  # one event per request, however often asked
