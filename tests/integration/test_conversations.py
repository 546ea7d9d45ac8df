"""Conversation lifecycle, retries and concurrency through a real `anvil serve`."""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

import anyio
import httpx
import pytest
from support.anvil_server import AnvilServer
from support.jsonrpc import envelope

pytestmark = pytest.mark.anyio


class Mcp:
    """Raw 2026-07-28 tool calls as one user."""

    def __init__(self, server: AnvilServer, http: httpx.AsyncClient, user: str | None = "alice") -> None:
        self.server = server
        self.http = http
        self.token = {} if user is None else {"Authorization": f"Bearer {server.token(user)}"}

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        call = envelope("tools/call", {"name": name, "arguments": arguments})
        response = await self.http.post(
            self.server.mcp_url, json=call.body, headers={**call.headers, **self.token}
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["result"]
        return result


def data(result: dict[str, Any]) -> dict[str, Any]:
    assert result["isError"] is False, result["content"]
    structured: dict[str, Any] = result["structuredContent"]
    return structured


def error_text(result: dict[str, Any]) -> str:
    assert result["isError"] is True, result
    text: str = result["content"][0]["text"]
    return text


def new_id() -> str:
    return f"it-{uuid.uuid4().hex[:10]}"


async def test_twenty_concurrent_asks_keep_twenty_turns(dev_server: AnvilServer) -> None:
    conversation = new_id()
    async with httpx.AsyncClient(timeout=30) as http:
        mcp = Mcp(dev_server, http)
        turns: list[int] = []

        async def ask(i: int) -> None:
            result = data(
                await mcp.call("ask", {"question": f"parallel {i}", "conversationId": conversation})
            )
            turns.append(result["turn"])

        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(ask, i)
        stored = data(await mcp.call("get_conversation", {"conversationId": conversation}))

    assert sorted(turns) == list(range(1, 21))
    assert [t["turn"] for t in stored["turns"]] == list(range(1, 21))
    assert sorted(t["question"] for t in stored["turns"]) == sorted(f"parallel {i}" for i in range(20))
    with sqlite3.connect(f"file:{dev_server.data_dir / 'conversations.sqlite3'}?mode=ro", uri=True) as db:
        (version,) = db.execute(
            "SELECT version FROM conversations WHERE conversation_id = ?", (conversation,)
        ).fetchone()
    assert version == 20  # one write per turn: versions went 1, 2, ..., 20


async def test_the_same_call_retried_five_times_is_one_turn(dev_server: AnvilServer) -> None:
    conversation = new_id()
    arguments = {"question": "exactly once", "conversationId": conversation, "clientRequestId": "retry-1"}
    async with httpx.AsyncClient(timeout=30) as http:
        mcp = Mcp(dev_server, http)
        results = [data(await mcp.call("ask", arguments)) for _ in range(5)]
        changed = await mcp.call("ask", {**arguments, "question": "something else"})
        stored = data(await mcp.call("get_conversation", {"conversationId": conversation}))
    assert {r["turn"] for r in results} == {1}
    assert all("Replayed" in r["note"] for r in results[1:])
    assert "retry-1" in error_text(changed) and "other arguments" in error_text(changed)
    assert [t["question"] for t in stored["turns"]] == ["exactly once"]


async def test_start_list_get_delete_over_mcp(dev_server: AnvilServer) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        mcp = Mcp(dev_server, http, user=f"lifecycle-{uuid.uuid4().hex[:6]}")
        started = data(
            await mcp.call("start_conversation", {"title": "Release plan", "instructions": "Be terse."})
        )
        conversation = started["conversationId"]
        first = data(await mcp.call("ask", {"question": "first?", "conversationId": conversation}))
        listed = data(await mcp.call("list_conversations", {"limit": 5}))
        read = data(await mcp.call("get_conversation", {"conversationId": conversation}))
        deleted = data(await mcp.call("delete_conversation", {"conversationId": conversation}))
        again = data(await mcp.call("delete_conversation", {"conversationId": conversation}))
        gone = await mcp.call("get_conversation", {"conversationId": conversation})
    assert started["expiresAt"].endswith("Z") and started["title"] == "Release plan"
    assert (first["turn"], first["created"]) == (1, False) and "[instructions: Be terse.]" in first["answer"]
    assert listed["conversations"][0]["conversationId"] == conversation
    assert listed["conversations"][0]["turns"] == 1 and listed["nextCursor"] is None
    assert read["instructions"] == "Be terse." and [t["question"] for t in read["turns"]] == ["first?"]
    assert deleted == {"deleted": True} and again == {"deleted": False}
    assert "was not found or has expired" in error_text(gone) and "start_conversation" in error_text(gone)


async def test_another_users_guessed_id_is_not_found(dev_server: AnvilServer) -> None:
    conversation = new_id()
    async with httpx.AsyncClient(timeout=30) as http:
        alice, mallory = Mcp(dev_server, http, "alice"), Mcp(dev_server, http, "mallory")
        data(await alice.call("ask", {"question": "alice only", "conversationId": conversation}))
        read = await mallory.call("get_conversation", {"conversationId": conversation})
        missing = await mallory.call("get_conversation", {"conversationId": new_id()})
        deleted = data(await mallory.call("delete_conversation", {"conversationId": conversation}))
        listed = data(await mallory.call("list_conversations", {}))
        still = data(await alice.call("get_conversation", {"conversationId": conversation}))
    assert error_text(read).split("'")[2] == error_text(missing).split("'")[2]  # same text but for the id
    assert deleted == {"deleted": False}
    assert conversation not in {c["conversationId"] for c in listed["conversations"]}
    assert [t["question"] for t in still["turns"]] == ["alice only"]


async def test_rest_conversation_routes(dev_server: AnvilServer) -> None:
    user = f"rest-{uuid.uuid4().hex[:6]}"
    headers = {"Authorization": f"Bearer {dev_server.token(user)}"}
    base = f"{dev_server.url}/api/conversations"
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        bodiless = await http.post(base)
        created = await http.post(base, json={"title": "REST"})
        conversation = created.json()["conversationId"]
        await http.post(f"{dev_server.url}/api/ask", json={"question": "q1", "conversationId": conversation})
        await http.post(f"{dev_server.url}/api/ask", json={"question": "q2", "conversationId": new_id()})
        listed = await http.get(base, params={"limit": 2})
        page2 = await http.get(base, params={"limit": 2, "cursor": listed.json()["nextCursor"]})
        one = await http.get(f"{base}/{conversation}", params={"limit": 1})
        missing = await http.get(f"{base}/{new_id()}")
        bad = await http.get(f"{base}/bad%20id")
        removed_all = await http.delete(base)
        after = await http.get(base)
        gone = await http.delete(f"{base}/{conversation}")
    assert bodiless.status_code == 201 and bodiless.json()["title"] is None
    assert created.status_code == 201 and created.json()["title"] == "REST"
    assert len(listed.json()["conversations"]) == 2 and listed.json()["nextCursor"]
    assert len(page2.json()["conversations"]) == 1 and page2.json()["nextCursor"] is None
    ids = [c["conversationId"] for page in (listed, page2) for c in page.json()["conversations"]]
    assert conversation in ids and len(set(ids)) == 3
    assert [t["question"] for t in one.json()["turns"]] == ["q1"]
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    assert bad.status_code == 400 and "^[A-Za-z0-9._-]{1,64}$" in bad.json()["detail"]
    assert removed_all.json() == {"deleted": 3}
    assert after.json() == {"conversations": [], "nextCursor": None}
    assert gone.status_code == 200 and gone.json() == {"deleted": False}


async def test_anonymous_callers_cannot_manage_conversations(anon_server: AnvilServer) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        mcp = Mcp(anon_server, http, user=None)
        started = await mcp.call("start_conversation", {})
        rest = await http.get(f"{anon_server.url}/api/conversations")
    assert "needs a signed-in user" in error_text(started)
    assert rest.status_code == 403 and "signed-in user" in rest.json()["detail"]
