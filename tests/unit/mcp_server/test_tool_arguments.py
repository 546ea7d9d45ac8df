"""Tool arguments reach the tools as sent: text that looks like JSON stays text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.asgi import client

from app.auth.dev import DevIssuer
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def anvil(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(store="memory", answer_engine="echo", data_dir=tmp_path))
    token = DevIssuer.load_or_create(tmp_path).mint("alice")
    async with client(app) as http:
        http.headers.update(
            {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"}
        )
        yield http


async def call(anvil: httpx.AsyncClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    reply = await anvil.post("/mcp", json=body)
    result: dict[str, Any] = reply.json()["result"]
    return result


@pytest.mark.parametrize("instructions", ['["be brief"]', '{"tone": "formal"}', "[1, 2]", "null", "42"])
async def test_instructions_that_look_like_json_are_kept_as_text(
    anvil: httpx.AsyncClient, instructions: str
) -> None:
    result = await call(
        anvil, "ask", {"question": "q", "conversationId": "c-1", "instructions": instructions}
    )
    assert not result.get("isError"), result
    back = await call(anvil, "get_conversation", {"conversationId": "c-1"})
    assert back["structuredContent"]["instructions"] == instructions


async def test_a_title_that_looks_like_json_is_kept_as_text(anvil: httpx.AsyncClient) -> None:
    started = await call(anvil, "start_conversation", {"title": '{"project": "anvil"}'})
    assert not started.get("isError"), started
    conversation_id = started["structuredContent"]["conversationId"]
    back = await call(anvil, "get_conversation", {"conversationId": conversation_id})
    assert back["structuredContent"]["title"] == '{"project": "anvil"}'


async def test_numbers_sent_as_text_are_still_accepted_and_wrong_types_still_refused(
    anvil: httpx.AsyncClient,
) -> None:
    found = await call(anvil, "search", {"searchText": "anything", "maxResults": "3"})
    assert not found.get("isError"), found
    refused = await call(anvil, "ask", {"question": ["not", "text"]})
    assert refused["isError"] and "question" in refused["content"][0]["text"]
