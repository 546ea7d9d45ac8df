"""`fetch` through a real `anvil serve` over the project's docs: REST and MCP read the same file."""

from __future__ import annotations

import httpx
import pytest
from support.anvil_server import AnvilServer
from support.jsonrpc import mcp_call


def get(server: AnvilServer, **params: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.token('reader')}"}
    return httpx.get(f"{server.url}/api/fetch", params=params, headers=headers)


def test_a_source_named_by_ask_is_read_whole_over_rest(docs_server: AnvilServer) -> None:
    asked = httpx.post(
        f"{docs_server.url}/api/ask",
        json={"question": "What is Anvil?"},
        headers={"Authorization": f"Bearer {docs_server.token('reader')}"},
    ).json()
    source = asked["sources"][0]["source"]
    read = get(docs_server, source=source, maxChars=100_000)
    assert read.status_code == 200, read.text
    body = read.json()
    assert body["source"] == source and body["truncated"] is False
    assert body["totalChars"] == len(body["text"])
    assert asked["answer"].split(": ", 1)[1][:40] in " ".join(body["text"].split())


def test_a_long_source_is_cut_and_says_so(docs_server: AnvilServer) -> None:
    body = get(docs_server, source="architecture.md", maxChars=500).json()
    assert body["truncated"] is True
    assert len(body["text"]) <= 500 < body["totalChars"]


@pytest.mark.parametrize("source", ["nope.md", "../pyproject.toml", "/etc/passwd"])
def test_anything_but_a_corpus_file_is_not_found(docs_server: AnvilServer, source: str) -> None:
    response = get(docs_server, source=source)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"].startswith(f"No source named {source!r} in the knowledge base")


def test_fetch_over_mcp_is_a_read_only_tool(docs_server: AnvilServer) -> None:
    reader = {"Authorization": f"Bearer {docs_server.token('reader')}"}
    arguments = {"source": "mcp.md", "maxChars": 200}
    result = mcp_call(docs_server, "fetch", arguments, reader, request_id=2).json()["result"]
    assert result["isError"] is False
    structured = result["structuredContent"]
    assert structured["source"] == "mcp.md" and structured["truncated"] is True
    text = result["content"][0]["text"]
    assert text.startswith(f"mcp.md: {structured['title']}\n\n")
    assert text.endswith(
        f"[Truncated: {len(structured['text'])} of {structured['totalChars']} characters shown.]"
    )
