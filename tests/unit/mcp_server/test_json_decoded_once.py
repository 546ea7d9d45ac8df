"""Anvil decodes a `POST /mcp` body once (`spec_fixes.checked_message`, with `app.http.json_text`)
and hands the decoded message on: the progress check reads it rather than parse the body again.
The SDK's transport parses the body once more itself, as its public API takes the body only as
bytes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pydantic_core
import pytest
from support.asgi import client
from support.decoders import of_anvil, record_callers

from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
SSE = "application/json, text/event-stream"


@pytest.fixture
async def anvil(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path)
    async with client(create_app(settings)) as http:
        yield http


@pytest.fixture
def decoders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Who calls `json.loads` or `pydantic_core.from_json` from now on (in call order)."""
    return record_callers(monkeypatch, (json, "loads"), (pydantic_core, "from_json"))


def ask(*, progress: bool, modern: bool) -> tuple[dict[str, Any], dict[str, str]]:
    meta: dict[str, Any] = {"progressToken": "p-1"} if progress else {}
    headers = {"Accept": SSE, "Content-Type": "application/json"}
    if modern:
        meta["io.modelcontextprotocol/protocolVersion"] = MODERN
        meta["io.modelcontextprotocol/clientCapabilities"] = {}
        headers |= {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "ask"}
    params = {"name": "ask", "arguments": {"question": "What is Anvil?"}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}, headers


@pytest.mark.parametrize("modern", [False, True], ids=["handshake era", "2026-07-28"])
@pytest.mark.parametrize("progress", [False, True], ids=["as json", "as a stream"])
async def test_anvil_decodes_a_call_once(
    anvil: httpx.AsyncClient, decoders: list[str], modern: bool, progress: bool
) -> None:
    # With a progressToken the progress check used to parse the body a second time.
    request, headers = ask(progress=progress, modern=modern)
    content = json.dumps(request).encode()
    decoders.clear()
    reply = await anvil.post("/mcp", content=content, headers=headers)
    seen = list(decoders)
    assert reply.status_code == 200 and "Echo: What is Anvil?" in reply.text
    assert of_anvil(seen) == ["app.http.json_text"]
    # The SDK's own parse, the only other one: if a release takes a decoded message, this changes
    # (and so does the request path in docs/architecture.md).
    assert [module.split(".")[0] for module in seen] == ["app", "mcp"]


async def test_a_body_anvil_refuses_is_decoded_once_and_never_reaches_the_sdk(
    anvil: httpx.AsyncClient, decoders: list[str]
) -> None:
    content = json.dumps([ask(progress=True, modern=False)[0]]).encode()
    decoders.clear()
    headers = {"Accept": SSE, "Content-Type": "application/json"}
    reply = await anvil.post("/mcp", content=content, headers=headers)
    seen = list(decoders)
    assert reply.status_code == 400 and reply.json()["error"]["code"] == -32600
    assert seen == ["app.http.json_text"]
