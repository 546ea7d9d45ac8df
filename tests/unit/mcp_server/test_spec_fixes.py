"""Each entry of `app.mcp_server.spec_fixes`: Anvil answers as the specification says, and the bare SDK
still does not. When an SDK release fixes a deviation, its `test_the_sdk_still_...` test fails:
then remove the entry (and that test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)
from support.asgi import client, post_scope
from support.jsonrpc import MODERN, Envelope, envelope

from app.main import create_app
from app.mcp_server.spec_fixes import SERVED_VERSIONS
from app.settings import Settings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def anvil(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path)
    async with client(create_app(settings)) as http:
        yield http


@pytest.fixture
async def bare() -> AsyncIterator[httpx.AsyncClient]:
    """The SDK's own stateless server with one tool, nothing of Anvil's."""

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=[Tool(name="echo", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="echo")])

    server: Server[Any] = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
            yield http


def discover() -> Envelope:
    return envelope("server/discover")


# 1. server/discover lists every revision served.


async def test_discover_lists_every_revision_anvil_serves(anvil: httpx.AsyncClient) -> None:
    sent = discover()
    reply = await anvil.post("/mcp", json=sent.body, headers=sent.headers)
    assert reply.json()["result"]["supportedVersions"] == list(SERVED_VERSIONS)
    assert {"2024-11-05", "2025-11-25", MODERN} <= set(SERVED_VERSIONS)


async def test_the_sdk_still_lists_only_the_modern_revision_in_discover(bare: httpx.AsyncClient) -> None:
    sent = discover()
    reply = await bare.post("/mcp", json=sent.body, headers=sent.headers)
    assert reply.json()["result"]["supportedVersions"] == [MODERN]


# 2. An unsupported MCP-Protocol-Version is -32022 naming every revision served.


def tools_list(version: str | None = None) -> Envelope:
    """`tools/list` in `version`'s era (None: no version header)."""
    return envelope("tools/list", version=version, request_id=5)


async def test_an_unsupported_version_is_32022_naming_every_revision(anvil: httpx.AsyncClient) -> None:
    unsupported = tools_list("1999-01-01")
    reply = await anvil.post("/mcp", json=unsupported.body, headers=unsupported.headers)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert reply.json()["id"] == 5 and error["code"] == -32022
    assert error["data"] == {"supported": list(SERVED_VERSIONS), "requested": "1999-01-01"}


async def test_the_sdk_still_names_only_the_modern_revision_as_supported(bare: httpx.AsyncClient) -> None:
    unsupported = tools_list("1999-01-01")
    reply = await bare.post("/mcp", json=unsupported.body, headers=unsupported.headers)
    error = reply.json()["error"]
    assert error["code"] != -32022 or error["data"]["supported"] == [MODERN]


# 3. Header values are compared without surrounding whitespace (RFC 9110 section 5.5).


def raw_headers(sent: Envelope) -> list[tuple[bytes, bytes]]:
    """`sent`'s headers, the routing ones with a trailing space and tab, as a proxy may forward them."""
    padding = {"MCP-Protocol-Version": b" ", "Mcp-Method": b" \t"}
    return [
        (name.lower().encode(), value.encode() + padding.get(name, b""))
        for name, value in sent.headers.items()
    ]


async def asgi_post(app: Any, body: bytes, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """One POST /mcp straight through ASGI, so the header bytes arrive exactly as given."""
    scope = post_scope([(b"host", b"127.0.0.1:8000"), *headers])
    sent: list[dict[str, Any]] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


async def test_routing_headers_are_read_without_surrounding_whitespace(tmp_path: Path) -> None:
    import json

    settings = Settings(auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path)
    app = create_app(settings)
    async with app.router.lifespan_context(app) as state:

        async def with_state(scope: Any, receive: Any, send: Any) -> None:
            await app({**scope, "state": dict(state)}, receive, send)

        status, body = await asgi_post(with_state, discover().content, raw_headers(discover()))
    assert status == 200 and "result" in json.loads(body)


async def test_the_sdk_still_refuses_routing_headers_with_surrounding_whitespace() -> None:
    import json

    server: Server[Any] = Server("bare")
    app = server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    async with app.router.lifespan_context(app):
        status, body = await asgi_post(app, discover().content, raw_headers(discover()))
    assert status == 400 and "error" in json.loads(body)


# 4. A body that is not one JSON-RPC message gets one clean error with a null id; nothing runs.

LEGACY_BATCHING = tools_list("2025-03-26").headers


async def test_a_batch_an_invalid_id_and_a_non_message_get_one_clean_error(anvil: httpx.AsyncClient) -> None:
    request = tools_list().body
    for body in ([request], {**request, "id": None}, {**request, "id": 1.5}, {}):
        reply = await anvil.post("/mcp", json=body, headers=LEGACY_BATCHING)
        assert reply.status_code == 400, body
        error = reply.json()["error"]
        assert reply.json() == {"jsonrpc": "2.0", "id": None, "error": error}
        assert error["code"] == -32600 and len(error["message"]) < 120, error


async def test_invalid_json_is_a_parse_error_in_both_eras(anvil: httpx.AsyncClient) -> None:
    for headers in (tools_list().headers, tools_list(MODERN).headers):
        reply = await anvil.post("/mcp", content=b"{oops", headers=headers)
        assert reply.status_code == 400 and reply.json()["id"] is None
        assert reply.json()["error"]["code"] == -32700


async def test_the_sdk_still_answers_a_batch_or_a_non_message_with_a_validation_dump(
    bare: httpx.AsyncClient,
) -> None:
    for body in ([tools_list().body], {}):
        reply = await bare.post("/mcp", json=body, headers=LEGACY_BATCHING)
        error = reply.json()["error"]
        assert error["code"] == -32602 and "validation error" in error["message"].lower(), error


async def test_the_sdk_still_takes_a_request_with_an_invalid_id_for_a_notification(
    bare: httpx.AsyncClient,
) -> None:
    for request_id in (None, 1.5, True, {}):
        sent = tools_list()
        reply = await bare.post("/mcp", json={**sent.body, "id": request_id}, headers=sent.headers)
        assert (reply.status_code, reply.content) == (202, b""), request_id
