"""The one door of `POST /mcp` (`McpEndpoint`): what it answers itself, and where it sends the
rest (the SDK's JSON request manager, or its streaming one for a request asking for progress)."""

from __future__ import annotations

import json

import httpx
import pytest
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from app.http.guard import BodyGuard
from app.mcp_server.server import McpEndpoint
from app.mcp_server.spec_fixes import SERVED_VERSIONS

pytestmark = pytest.mark.anyio


def stand_in(name: str) -> object:
    """An ASGI app answering which of the two managers it stands for, with the body it got."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        await JSONResponse({"served_by": name, "body": message.get("body", b"").decode()})(
            scope, receive, send
        )

    return app


def client() -> httpx.AsyncClient:
    """The endpoint behind `BodyGuard`, which reads the body and keeps it for the endpoint."""
    endpoint = McpEndpoint(stand_in("json"), stand_in("streaming"))  # type: ignore[arg-type]
    guarded = BodyGuard(endpoint, max_body_bytes=4096)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=guarded), base_url="http://anvil.test")


async def test_an_unknown_protocol_version_gets_a_json_rpc_error_naming_every_version() -> None:
    request = {"jsonrpc": "2.0", "id": 42, "method": "tools/list"}
    async with client() as http:
        response = await http.post("/mcp", json=request, headers={"MCP-Protocol-Version": "2099-01-01"})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()
    assert (error["jsonrpc"], error["id"], error["error"]["code"]) == ("2.0", 42, -32022)
    assert error["error"]["data"] == {"supported": list(SERVED_VERSIONS), "requested": "2099-01-01"}


async def test_an_unknown_protocol_version_with_an_unreadable_body_has_a_null_id() -> None:
    async with client() as http:
        response = await http.post(
            "/mcp", content=b"not json", headers={"MCP-Protocol-Version": "2099-01-01"}
        )
    assert response.status_code == 400
    assert response.json()["id"] is None


async def test_every_served_version_reaches_the_sdk_with_its_body() -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    async with client() as http:
        for version in SERVED_VERSIONS:
            response = await http.post("/mcp", content=body, headers={"MCP-Protocol-Version": version})
            assert response.json() == {"served_by": "json", "body": body}


async def test_a_batch_is_answered_at_the_door_and_reaches_no_manager() -> None:
    async with client() as http:
        response = await http.post("/mcp", json=[{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    assert response.json()["error"]["code"] == -32600
    assert "served_by" not in response.json()


async def test_a_request_for_progress_from_a_client_reading_sse_goes_to_the_streaming_manager() -> None:
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ask", "_meta": {"progressToken": 7}},
    }
    sse = {"Accept": "application/json, text/event-stream"}
    async with client() as http:
        streamed = await http.post("/mcp", json=request, headers=sse)
        plain = await http.post("/mcp", json=request, headers={"Accept": "application/json"})
    assert streamed.json()["served_by"] == "streaming"
    assert plain.json()["served_by"] == "json"


async def test_a_request_the_sdk_refuses_from_its_headers_goes_to_the_manager_its_body_asks_for() -> None:
    # Anvil does not decode such a body for itself (the SDK answers 406 from the headers), but
    # the two managers word that 406 differently: the body still picks which one answers.
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ask", "_meta": {"progressToken": 7}},
    }
    async with client() as http:
        streamed = await http.post("/mcp", json=request, headers={"Accept": "text/event-stream"})
        plain = await http.post(
            "/mcp", json={**request, "params": {}}, headers={"Accept": "text/event-stream"}
        )
    assert streamed.json()["served_by"] == "streaming"
    assert plain.json()["served_by"] == "json"
