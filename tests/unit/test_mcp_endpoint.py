"""The single-exchange path for handshake-era calls answers exactly as the SDK's own path does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
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
    "ask with an ignored id": call("ask", {"question": "q", "conversationId": "abc"}),
    "ask with a bad id": call("ask", {"question": "q", "conversationId": "not valid!"}),
    "ask without a question": call("ask", {}),
    "ask with arguments of the wrong type": call("ask", {"question": 42}),
    "search": call("search", {"searchText": "anything", "maxResults": 3}),
    "search with maxResults out of range": call("search", {"searchText": "x", "maxResults": 500}),
    "unknown tool": call("no_such_tool", {}),
    "start_conversation anonymously": call("start_conversation", {}),
}


async def post(anvil: Anvil, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    transport = httpx.ASGITransport(app=anvil)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
        response = await client.post("/mcp", json=body, headers={"Accept": ACCEPT, **headers})
    return response.status_code, response.json() if response.content else None


@pytest.mark.parametrize("version", [None, "2025-03-26", "2025-06-18", "2025-11-25"])
@pytest.mark.parametrize("case", sorted(REQUESTS))
async def test_single_exchange_answers_like_the_sdk_session_path(
    anvil: Anvil, case: str, version: str | None
) -> None:
    headers = {"MCP-Protocol-Version": version} if version else {}
    anvil.endpoint.single_exchange = True
    fast = await post(anvil, REQUESTS[case], headers)
    anvil.endpoint.single_exchange = False
    sdk = await post(anvil, REQUESTS[case], headers)
    assert fast == sdk, json.dumps({"single exchange": fast, "sdk": sdk}, indent=1)


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
