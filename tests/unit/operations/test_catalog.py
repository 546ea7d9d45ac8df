"""Each operation is declared once: the MCP tool and the REST route say the same thing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from support.asgi import client

from app.auth.dev import DevIssuer
from app.domain.conversation import CONVERSATION_ID_PATTERN
from app.main import create_app
from app.operations.catalog import OPERATIONS
from app.settings import Settings

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings(store="memory", answer_engine="echo", data_dir=tmp_path))
    token = DevIssuer.load_or_create(tmp_path).mint("alice")
    async with client(app) as running:
        running.headers.update({"Accept": ACCEPT, "Authorization": f"Bearer {token}"})
        yield running


async def rpc(http: httpx.AsyncClient, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        body["params"] = params
    reply = await http.post("/mcp", json=body)
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()["result"]
    return result


async def tools(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in (await rpc(http, "tools/list"))["tools"]}


async def call(http: httpx.AsyncClient, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return await rpc(http, "tools/call", {"name": name, "arguments": arguments})


async def test_every_mcp_operation_is_a_tool_and_delete_all_is_rest_only(http: httpx.AsyncClient) -> None:
    listed = await tools(http)
    assert set(listed) == {
        "ask",
        "search",
        "fetch",
        "start_conversation",
        "list_conversations",
        "get_conversation",
        "delete_conversation",
    }
    assert {o.name for o in OPERATIONS if o.tool} == set(listed)


# (readOnlyHint, destructiveHint, idempotentHint): what a host needs to decide on a confirmation.
EXPECTED_HINTS = {
    "ask": (False, False, False),
    "start_conversation": (False, False, False),
    "search": (True, False, True),
    "fetch": (True, False, True),
    "list_conversations": (True, False, True),
    "get_conversation": (True, False, True),
    "delete_conversation": (False, True, True),
}


async def test_tools_carry_titles_and_annotations_a_host_can_act_on(http: httpx.AsyncClient) -> None:
    for name, tool in (await tools(http)).items():
        hints = tool["annotations"]
        assert tool["title"] and hints["title"] == tool["title"]
        assert (hints["readOnlyHint"], hints["destructiveHint"], hints["idempotentHint"]) == EXPECTED_HINTS[
            name
        ]
        assert hints["openWorldHint"] is False
        assert len(tool["description"]) > 60, f"{name}: say what it does and when to use it"


def rule_of(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """The constraints on one property, looking through `anyOf` for optional ones."""
    field = schema["properties"][name]
    variants = [v for v in field.get("anyOf", [field]) if v.get("type") != "null"]
    assert len(variants) == 1
    return dict(variants[0])


async def test_tool_schemas_carry_the_rules_a_model_must_follow(http: httpx.AsyncClient) -> None:
    listed = await tools(http)
    for name in ("ask", "get_conversation", "delete_conversation"):
        assert rule_of(listed[name]["inputSchema"], "conversationId")["pattern"] == CONVERSATION_ID_PATTERN
    assert rule_of(listed["ask"]["inputSchema"], "clientRequestId")["pattern"] == CONVERSATION_ID_PATTERN
    max_results = rule_of(listed["search"]["inputSchema"], "maxResults")
    assert (max_results["type"], max_results["minimum"], max_results["maximum"]) == ("integer", 1, 50)
    assert (rule_of(listed["list_conversations"]["inputSchema"], "limit")["maximum"]) == 100
    assert (rule_of(listed["get_conversation"]["inputSchema"], "limit")["maximum"]) == 1000
    assert listed["ask"]["inputSchema"]["required"] == ["question"]
    assert listed["ask"]["inputSchema"]["additionalProperties"] is False


def without_null_defaults(schema: Any) -> Any:
    """`schema` without `"default": null` (the OpenAPI renderer leaves those out)."""
    if isinstance(schema, dict):
        return {k: without_null_defaults(v) for k, v in schema.items() if not (k == "default" and v is None)}
    if isinstance(schema, list):
        return [without_null_defaults(v) for v in schema]
    return schema


async def test_the_openapi_document_carries_the_same_rules(http: httpx.AsyncClient) -> None:
    spec = (await http.get("/openapi.json")).json()
    listed = await tools(http)
    body = spec["paths"]["/api/ask"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert without_null_defaults(body) == without_null_defaults(listed["ask"]["inputSchema"])
    for method in ("get", "delete"):
        parameters = spec["paths"]["/api/conversations/{conversationId}"][method]["parameters"]
        (path_parameter,) = [p for p in parameters if p["in"] == "path"]
        assert path_parameter["schema"]["pattern"] == CONVERSATION_ID_PATTERN
    search = {p["name"]: p for p in spec["paths"]["/api/search"]["get"]["parameters"]}
    assert search["maxResults"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 50, "default": 5}
    assert search["searchText"]["required"] is True
    listing = spec["paths"]["/api/conversations"]["get"]
    assert listing["description"] == listed["list_conversations"]["description"]


async def test_every_result_matches_the_output_schema_it_declares(http: httpx.AsyncClient) -> None:
    listed = await tools(http)
    started = await call(http, "start_conversation", {"title": "Plan", "instructions": "Be brief."})
    conversation = started["structuredContent"]["conversationId"]
    calls = {
        "start_conversation": started,
        "ask": await call(http, "ask", {"question": "What is Anvil?", "conversationId": conversation}),
        "search": await call(http, "search", {"searchText": "anything", "maxResults": 2}),
        "list_conversations": await call(http, "list_conversations", {"limit": 5}),
        "get_conversation": await call(http, "get_conversation", {"conversationId": conversation}),
        "delete_conversation": await call(http, "delete_conversation", {"conversationId": conversation}),
    }
    for name, result in calls.items():
        assert not result.get("isError"), (name, result)
        jsonschema.validate(result["structuredContent"], listed[name]["outputSchema"])
        assert result["content"][0]["type"] == "text" and result["content"][0]["text"]
    assert calls["ask"]["content"][0]["text"] == calls["ask"]["structuredContent"]["answer"]
    assert calls["delete_conversation"]["content"][0]["text"] == f"Deleted conversation {conversation}."


BAD_INPUT = [
    ("ask", {"question": "q", "conversationId": "not valid!"}, "POST", "/api/ask", None),
    ("ask", {"question": ""}, "POST", "/api/ask", None),
    ("ask", {"question": "q", "extra": 1}, "POST", "/api/ask", None),
    ("search", {"searchText": "x", "maxResults": 500}, "GET", "/api/search", None),
    ("list_conversations", {"limit": 0}, "GET", "/api/conversations", None),
    ("get_conversation", {"conversationId": "bad id"}, "GET", "/api/conversations/bad id", {}),
]


@pytest.mark.parametrize(("tool", "arguments", "method", "path", "query"), BAD_INPUT)
async def test_bad_input_gets_the_same_words_from_both_surfaces(
    http: httpx.AsyncClient,
    tool: str,
    arguments: dict[str, Any],
    method: str,
    path: str,
    query: dict[str, Any] | None,
) -> None:
    result = await call(http, tool, arguments)
    assert result["isError"] is True
    if method == "POST":
        response = await http.post(path, json=arguments)
    else:
        response = await http.request(method, path, params=arguments if query is None else query)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == result["content"][0]["text"]
    assert response.json()["detail"].startswith(f"Invalid arguments for {tool}: ")
    assert "Fix them and call again." in response.json()["detail"]


async def test_an_unknown_argument_is_named_and_the_value_never_echoed(http: httpx.AsyncClient) -> None:
    result = await call(http, "ask", {"question": "q", "secretish": "value-123"})
    text = result["content"][0]["text"]
    assert "secretish: not an argument of this operation" in text and "value-123" not in text


async def test_an_unknown_tool_is_a_json_rpc_invalid_params_error(http: httpx.AsyncClient) -> None:
    reply = await http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "nope", "arguments": {}}},
    )
    error = reply.json()["error"]
    assert error["code"] == -32602 and "Available: ask, search" in error["message"]


async def test_rest_ignores_query_parameters_that_are_not_arguments(http: httpx.AsyncClient) -> None:
    found = await http.get("/api/search", params={"searchText": "anything", "maxResults": 2, "_": "123"})
    assert found.status_code == 200 and found.json() == {"results": [], "indexVersion": None}
    refused = await http.post("/api/ask", params={"_": "1"}, json={"question": "q", "unknown": 1})
    assert refused.status_code == 400 and "unknown: not an argument" in refused.json()["detail"]
