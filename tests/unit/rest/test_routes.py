"""The REST routes: one per operation, arguments gathered from path, query or body and checked by
the operation's own model, results as its result model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute
from support.asgi import client

from app.auth.dev import DevIssuer
from app.main import create_app
from app.operations.catalog import OPERATIONS
from app.settings import Settings

pytestmark = pytest.mark.anyio


def settings(tmp_path: Path, auth_mode: str = "dev") -> Settings:
    return Settings(auth_mode=auth_mode, store="memory", answer_engine="echo", data_dir=tmp_path)


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A client signed in as alice."""
    token = DevIssuer.load_or_create(tmp_path).mint("alice")
    async with client(create_app(settings(tmp_path))) as running:
        running.headers["Authorization"] = f"Bearer {token}"
        yield running


def assert_invalid(response: httpx.Response, says: str) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("/invalid-input") and says in problem["detail"], problem


def test_every_operation_is_one_route_with_its_method_status_and_operation_id(tmp_path: Path) -> None:
    routes = {
        route.operation_id: route
        for route in create_app(settings(tmp_path)).routes
        if isinstance(route, APIRoute)
    }
    for operation in OPERATIONS:
        route = routes[operation.route.operation_id]
        assert (route.path, route.methods) == (operation.route.path, {operation.route.method})
        assert route.status_code == operation.route.status_code
        assert route.response_model is operation.result


async def test_ask_takes_its_arguments_as_a_json_body(http: httpx.AsyncClient) -> None:
    response = await http.post("/api/ask", json={"question": "What is Anvil?", "conversationId": "c-1"})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    answer = response.json()
    assert (answer["conversationId"], answer["created"], answer["turn"]) == ("c-1", True, 1)
    assert "What is Anvil?" in answer["answer"]


async def test_a_body_that_is_not_a_json_object_of_the_arguments_is_refused(http: httpx.AsyncClient) -> None:
    headers = {"Content-Type": "application/json"}
    assert_invalid(await http.post("/api/ask", content=b"{not json", headers=headers), "not valid JSON")
    assert_invalid(await http.post("/api/ask", json=["q"]), "must be a JSON object")
    assert_invalid(await http.post("/api/ask", json={"question": "q", "extra": 1}), "extra")
    assert_invalid(await http.post("/api/ask", json={}), "question")


async def test_an_empty_body_means_no_arguments(http: httpx.AsyncClient) -> None:
    started = await http.post("/api/conversations", content=b"")
    assert started.status_code == 201
    assert started.json()["conversationId"] and started.json()["title"] is None


async def test_query_parameters_that_are_no_argument_are_left_alone(http: httpx.AsyncClient) -> None:
    response = await http.get("/api/search", params={"searchText": "anvil", "maxResults": "2", "_": "17"})
    assert response.status_code == 200
    assert len(response.json()["results"]) <= 2
    assert_invalid(await http.get("/api/search", params={"maxResults": "2"}), "searchText")


async def test_a_conversation_is_read_and_deleted_by_its_path(http: httpx.AsyncClient) -> None:
    started = (await http.post("/api/conversations", json={"title": "Plan"})).json()
    path = f"/api/conversations/{started['conversationId']}"
    await http.post("/api/ask", json={"question": "first", "conversationId": started["conversationId"]})
    read = await http.get(path, params={"limit": "5"})
    assert read.status_code == 200 and [t["question"] for t in read.json()["turns"]] == ["first"]
    listed = (await http.get("/api/conversations")).json()
    assert [c["conversationId"] for c in listed["conversations"]] == [started["conversationId"]]
    assert (await http.delete(path)).json() == {"deleted": True}
    assert (await http.delete(path)).json() == {"deleted": False}
    assert (await http.get(path)).status_code == 404
    assert_invalid(await http.get("/api/conversations/not%20an%20id"), "conversationId must be")


async def test_deleting_all_conversations_counts_them(http: httpx.AsyncClient) -> None:
    for title in ("a", "b"):
        await http.post("/api/conversations", json={"title": title})
    assert (await http.delete("/api/conversations")).json() == {"deleted": 2}
    assert (await http.get("/api/conversations")).json()["conversations"] == []


async def test_without_sign_in_asks_are_one_shot_and_conversations_need_a_user(tmp_path: Path) -> None:
    async with client(create_app(settings(tmp_path, "none"))) as http:
        answer = await http.post("/api/ask", json={"question": "q", "conversationId": "c-1"})
        assert answer.status_code == 200 and answer.json()["conversationId"] is None
        listed = await http.get("/api/conversations")
        assert listed.status_code == 403
        assert listed.json()["type"].endswith("/sign-in-required")
