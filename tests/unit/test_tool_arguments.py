"""Tool arguments reach the tools as sent: text that looks like JSON stays text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.adapters.auth.dev import DevIssuer
from app.settings import Settings
from app.main import Anvil, create_app

pytestmark = pytest.mark.anyio


@pytest.fixture
async def anvil(tmp_path: Path) -> AsyncIterator[Anvil]:
    app = create_app(Settings(store="memory", answer_engine="echo", data_dir=tmp_path))
    async with app._lifespan(app):
        yield app


async def call(anvil: Anvil, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    token = DevIssuer.load_or_create(anvil.settings.data_dir).mint("alice")
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=anvil), base_url="http://127.0.0.1:8000"
    ) as client:
        reply = await client.post("/mcp", json=body, headers=headers)
    result: dict[str, Any] = reply.json()["result"]
    return result


@pytest.mark.parametrize("instructions", ['["be brief"]', '{"tone": "formal"}', "[1, 2]", "null", "42"])
async def test_instructions_that_look_like_json_are_kept_as_text(anvil: Anvil, instructions: str) -> None:
    result = await call(
        anvil, "ask", {"question": "q", "conversationId": "c-1", "instructions": instructions}
    )
    assert not result.get("isError"), result
    back = await call(anvil, "get_conversation", {"conversationId": "c-1"})
    assert back["structuredContent"]["instructions"] == instructions


async def test_a_title_that_looks_like_json_is_kept_as_text(anvil: Anvil) -> None:
    started = await call(anvil, "start_conversation", {"title": '{"project": "anvil"}'})
    assert not started.get("isError"), started
    conversation_id = started["structuredContent"]["conversationId"]
    back = await call(anvil, "get_conversation", {"conversationId": conversation_id})
    assert back["structuredContent"]["title"] == '{"project": "anvil"}'


async def test_numbers_sent_as_text_are_still_accepted_and_wrong_types_still_refused(anvil: Anvil) -> None:
    found = await call(anvil, "search", {"searchText": "anything", "maxResults": "3"})
    assert not found.get("isError"), found
    refused = await call(anvil, "ask", {"question": ["not", "text"]})
    assert refused["isError"] and "question" in refused["content"][0]["text"]
