"""The official Python SDK client, in every mode, against a real `anvil serve`."""

from __future__ import annotations

import uuid
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from support.anvil_server import AnvilServer

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto", "2026-07-28"]


def client(server: AnvilServer, token: str | None, mode: str) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(server.mcp_url, http_client=httpx2.AsyncClient(headers=headers))
    return Client(transport, mode=mode)  # type: ignore[arg-type]


def structured(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result.content
    data = result.structured_content
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("mode", MODES)
async def test_two_asks_with_one_id_continue_the_conversation(dev_server: AnvilServer, mode: str) -> None:
    conversation = f"sdk-{mode}-{uuid.uuid4().hex[:8]}"
    async with client(dev_server, dev_server.token("alice"), mode) as mcp:
        first = structured(
            await mcp.call_tool("ask", {"question": "What is Anvil?", "conversationId": conversation})
        )
        second = structured(
            await mcp.call_tool("ask", {"question": "And its store?", "conversationId": conversation})
        )
    assert first == {
        "answer": "Echo: What is Anvil?",
        "conversationId": conversation,
        "note": None,
        "created": True,
        "turn": 1,
        "condensed": False,
        "sources": [],
        "usage": None,
    }
    assert second["turn"] == 2 and second["created"] is False
    assert "previous question: What is Anvil?" in second["answer"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_text_content_is_the_answer(dev_server: AnvilServer, mode: str) -> None:
    async with client(dev_server, dev_server.token("alice"), mode) as mcp:
        result = await mcp.call_tool("ask", {"question": "plain text?"})
    assert [c.text for c in result.content] == ["Echo: plain text?"]  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_listed_with_output_schemas(dev_server: AnvilServer, mode: str) -> None:
    async with client(dev_server, dev_server.token("alice"), mode) as mcp:
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
    assert set(tools) == {
        "ask",
        "search",
        "fetch",
        "start_conversation",
        "list_conversations",
        "get_conversation",
        "delete_conversation",
    }
    assert all(tool.output_schema is not None for tool in tools.values())
    ask = tools["ask"]
    assert set(ask.input_schema["properties"]) == {
        "question",
        "conversationId",
        "instructions",
        "clientRequestId",
    }
    assert ask.input_schema["required"] == ["question"]
    assert ask.output_schema is not None
    assert set(ask.output_schema["required"]) >= {"answer", "conversationId", "note", "created", "turn"}
    assert "conversationId" in (ask.description or "") and "30 days" in (ask.description or "")
    assert tools["search"].output_schema is not None
    assert set(tools["search"].input_schema["properties"]) == {"searchText", "maxResults"}
    assert set(tools["fetch"].input_schema["properties"]) == {"source", "maxChars"}


@pytest.mark.parametrize("mode", MODES)
async def test_without_an_id_the_answer_is_one_shot(dev_server: AnvilServer, mode: str) -> None:
    async with client(dev_server, dev_server.token("alice"), mode) as mcp:
        data = structured(await mcp.call_tool("ask", {"question": "one shot"}))
    assert data["conversationId"] is None and data["turn"] is None and data["created"] is False
    assert "No conversationId" in data["note"]


@pytest.mark.parametrize("mode", MODES)
async def test_anonymous_callers_get_one_shot_answers(anon_server: AnvilServer, mode: str) -> None:
    async with client(anon_server, None, mode) as mcp:
        first = structured(await mcp.call_tool("ask", {"question": "q1", "conversationId": "shared"}))
        second = structured(await mcp.call_tool("ask", {"question": "q2", "conversationId": "shared"}))
    for data in (first, second):
        assert data["conversationId"] is None and data["turn"] is None
        assert "not signed in" in data["note"]
    assert second["answer"] == "Echo: q2"  # nothing of q1 was kept


@pytest.mark.parametrize("mode", MODES)
async def test_another_user_with_the_same_id_starts_fresh(dev_server: AnvilServer, mode: str) -> None:
    conversation = f"shared-{mode}-{uuid.uuid4().hex[:8]}"
    async with client(dev_server, dev_server.token("alice"), mode) as alice:
        await alice.call_tool("ask", {"question": "alice secret", "conversationId": conversation})
    async with client(dev_server, dev_server.token("bob"), mode) as bob:
        data = structured(
            await bob.call_tool("ask", {"question": "bob asks", "conversationId": conversation})
        )
    assert data["created"] is True and data["turn"] == 1
    assert "alice secret" not in data["answer"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_bad_conversation_id_is_a_tool_error_naming_the_rule(
    dev_server: AnvilServer, mode: str
) -> None:
    async with client(dev_server, dev_server.token("alice"), mode) as mcp:
        result = await mcp.call_tool("ask", {"question": "q", "conversationId": "not ok/../"})
    assert result.is_error is True
    text = result.content[0].text  # type: ignore[union-attr]
    assert "^[A-Za-z0-9._-]{1,64}$" in text


@pytest.mark.parametrize("mode", MODES)
async def test_an_unknown_tool_is_invalid_params(dev_server: AnvilServer, mode: str) -> None:
    async with client(dev_server, dev_server.token("alice"), mode) as mcp:
        with pytest.raises(MCPError) as caught:
            await mcp.call_tool("no_such_tool", {})
    assert caught.value.error.code == -32602


async def test_search_ranks_the_projects_docs(docs_server: AnvilServer) -> None:
    async with client(docs_server, docs_server.token("alice"), "auto") as mcp:
        data = structured(
            await mcp.call_tool("search", {"searchText": "conversationId expires", "maxResults": 3})
        )
    results = data["results"]
    assert 1 <= len(results) <= 3
    assert all(r["source"].endswith(".md") and r["score"] > 0 for r in results)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)


async def test_retrieval_answers_cite_the_docs(docs_server: AnvilServer) -> None:
    async with client(docs_server, docs_server.token("alice"), "legacy") as mcp:
        data = structured(
            await mcp.call_tool(
                "ask", {"question": "How long does a conversation live?", "conversationId": "docs-1"}
            )
        )
    assert data["sources"], data
    assert data["sources"][0]["source"] in data["answer"]


@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_name_the_field_without_echoing_values(
    dev_server: AnvilServer, mode: str
) -> None:
    async with client(dev_server, dev_server.token("alice"), mode) as mcp:
        missing = await mcp.call_tool("ask", {"conversationId": "secret-value-1"})
        wrong = await mcp.call_tool("search", {"searchText": "x", "maxResults": "many"})
    assert missing.is_error is True and wrong.is_error is True
    missing_text = missing.content[0].text  # type: ignore[union-attr]
    wrong_text = wrong.content[0].text  # type: ignore[union-attr]
    assert missing_text.startswith("Invalid arguments for ask: question: Field required")
    assert "maxResults" in wrong_text and "many" not in wrong_text
    assert "secret-value-1" not in missing_text and "pydantic" not in missing_text
