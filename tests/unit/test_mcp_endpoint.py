"""The single-exchange path for handshake-era calls answers exactly as the SDK's own path does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from app.main import Anvil, create_app

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"


@pytest.fixture
async def anvil(tmp_path: Path) -> AsyncIterator[Anvil]:
    settings = Settings(auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path)
    app = create_app(settings)
    async with app.api.router.lifespan_context(app.api):
        yield app


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


async def exchange(
    anvil: Anvil, body: Any, headers: dict[str, str] | list[tuple[str, str]]
) -> httpx.Response:
    """POST `body` to /mcp (with JSON and SSE accepted unless `headers` say otherwise); a list
    of header pairs may name one header twice."""
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers)
    named = {name.lower() for name, _ in pairs}
    pairs += [
        (k, v)
        for k, v in (("Accept", ACCEPT), ("Content-Type", "application/json"))
        if k.lower() not in named
    ]
    transport = httpx.ASGITransport(app=anvil)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
        response = await client.post("/mcp", content=json.dumps(body), headers=pairs)
    if response.content:
        assert response.headers["content-length"] == str(len(response.content))
    return response


async def post(anvil: Anvil, body: Any, headers: dict[str, str] | list[tuple[str, str]]) -> tuple[int, Any]:
    response = await exchange(anvil, body, headers)
    if not response.content:
        return response.status_code, None
    if response.headers.get("content-type") != "application/json":
        return response.status_code, response.text
    return response.status_code, response.json()


async def both_paths(anvil: Anvil, body: Any, headers: dict[str, str] | list[tuple[str, str]]) -> None:
    """The single-exchange path and the SDK's own path answer alike: status, type and bytes."""
    answers = []
    for single_exchange in (True, False):
        anvil.endpoint.single_exchange = single_exchange
        response = await exchange(anvil, body, headers)
        answers.append((response.status_code, response.headers.get("content-type"), response.text))
    assert answers[0] == answers[1], f"single exchange: {answers[0]}\nsdk: {answers[1]}"


@pytest.mark.parametrize("version", [None, "2025-03-26", "2025-06-18", "2025-11-25"])
@pytest.mark.parametrize("case", sorted(REQUESTS))
async def test_single_exchange_answers_like_the_sdk_session_path(
    anvil: Anvil, case: str, version: str | None
) -> None:
    await both_paths(anvil, REQUESTS[case], {"MCP-Protocol-Version": version} if version else {})


async def test_other_methods_still_reach_the_sdk(anvil: Anvil) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    status, reply = await post(anvil, initialize, {})
    assert status == 200 and reply["result"]["protocolVersion"] == "2025-06-18"
    status, reply = await post(anvil, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {})
    assert status == 202


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


def modern_cases() -> dict[str, tuple[Any, dict[str, str] | list[tuple[str, str]]]]:
    cases: dict[str, tuple[Any, dict[str, str] | list[tuple[str, str]]]] = {
        name: modern(request) for name, request in REQUESTS.items()
    }
    ask, headers = modern(call("ask", {"question": "q"}))
    cases["with client info and a progress token"] = modern(
        call("ask", {"question": "q"}),
        **{"io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}},
        progressToken="p-1",
    )
    cases["without the envelope"] = ({**ask, "params": {"name": "ask", "arguments": {}}}, headers)
    cases["Mcp-Method disagrees"] = (ask, {**headers, "Mcp-Method": "tools/list"})
    cases["Mcp-Name disagrees"] = (ask, {**headers, "Mcp-Name": "search"})
    cases["Mcp-Name missing"] = (ask, {k: v for k, v in headers.items() if k != "Mcp-Name"})
    cases["envelope names another version"] = (
        {
            **ask,
            "params": {
                **ask["params"],
                "_meta": {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2025-06-18"},
            },
        },
        headers,
    )
    cases["routing header twice"] = (ask, [*headers.items(), ("Mcp-Method", "tools/call")])
    cases["another header twice"] = (ask, [*headers.items(), ("X-Trace", "1"), ("X-Trace", "2")])
    cases["an Mcp-Param header the tool does not declare"] = (ask, {**headers, "Mcp-Param-Question": "q"})
    cases["a boolean id"] = ({**ask, "id": True}, headers)
    cases["a null id"] = ({**ask, "id": None}, headers)
    cases["an extra envelope member"] = ({**ask, "extra": 1}, headers)
    cases["a notification"] = ({k: v for k, v in ask.items() if k != "id"}, headers)
    cases["a batch"] = ([ask], headers)
    cases["params that are a list"] = ({**ask, "params": [1]}, headers)
    cases["initialize"] = modern({"jsonrpc": "2.0", "id": 9, "method": "initialize"})
    cases["JSON not accepted"] = (ask, {**headers, "Accept": "text/event-stream"})
    cases["wildcard accept"] = (ask, {**headers, "Accept": "*/*"})
    cases["not JSON"] = (ask, {**headers, "Content-Type": "text/plain"})
    return cases


MODERN_CASES = modern_cases()


@pytest.mark.parametrize("case", sorted(MODERN_CASES))
async def test_2026_07_28_single_exchange_answers_like_the_sdk(anvil: Anvil, case: str) -> None:
    await both_paths(anvil, *MODERN_CASES[case])


async def refuse_sdk_path(*_: Any) -> None:
    raise AssertionError("the request went to the SDK's session manager")


@pytest.mark.parametrize(
    ("case", "version"),
    [
        ("ask one-shot", None),
        ("ask one-shot", "2025-06-18"),
        ("tools/list", None),
        ("ask one-shot", MODERN),
        ("tools/list", MODERN),
        ("unknown tool", MODERN),
        ("ask without a question", MODERN),
        ("another header twice", MODERN),
    ],
)
async def test_plain_calls_take_the_single_exchange_path(
    anvil: Anvil, monkeypatch: pytest.MonkeyPatch, case: str, version: str | None
) -> None:
    monkeypatch.setattr(anvil.mcp.session_manager, "handle_request", refuse_sdk_path)
    if version == MODERN:
        body, headers = MODERN_CASES[case]
    else:
        body, headers = REQUESTS[case], ({"MCP-Protocol-Version": version} if version else {})
    _, reply = await post(anvil, body, headers)
    assert reply["id"] == body["id"] and ("result" in reply or "error" in reply)


@pytest.mark.parametrize(
    "case",
    [
        "Mcp-Name disagrees",
        "routing header twice",
        "an Mcp-Param header the tool does not declare",
        "a notification",
        "initialize",
    ],
)
async def test_unusual_2026_07_28_requests_go_to_the_sdk(
    anvil: Anvil, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    reached: list[str] = []
    original = anvil.mcp.session_manager.handle_request

    async def spy(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await original(scope, receive, send)

    monkeypatch.setattr(anvil.mcp.session_manager, "handle_request", spy)
    await post(anvil, *MODERN_CASES[case])
    assert reached == ["/mcp"]


async def test_a_tool_declaring_param_headers_is_left_to_the_sdk(anvil: Anvil) -> None:
    schemas = {"ask": {"type": "object", "properties": {"q": {"type": "string", "x-mcp-header": "Q"}}}}
    anvil.mcp._lowlevel_server.get_tool_input_schema = schemas.get
    assert anvil.endpoint._declares_param_headers({"name": "ask"})
    assert not anvil.endpoint._declares_param_headers({"name": "search"})


@pytest.mark.parametrize("era", ["2025-06-18", MODERN])
async def test_the_first_of_repeated_content_types_decides_on_both_paths(anvil: Anvil, era: str) -> None:
    body, headers = MODERN_CASES["ask one-shot"] if era == MODERN else (REQUESTS["ask one-shot"], {})
    pairs = [*headers.items(), ("Content-Type", "text/plain"), ("Content-Type", "application/json")]
    if era != MODERN:
        pairs.append(("MCP-Protocol-Version", era))
    await both_paths(anvil, body, pairs)
