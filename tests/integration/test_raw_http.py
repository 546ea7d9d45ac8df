"""Raw HTTP in both protocol eras, REST, and the HTTP-level refusals, against a real server."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from support.anvil_server import AnvilServer
from support.jsonrpc import ACCEPT, envelope

ALL_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]


def auth(server: AnvilServer, user: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token(user)}", "Accept": ACCEPT}


def legacy(
    server: AnvilServer, method: str, params: dict[str, Any] | None = None, **headers: str
) -> httpx.Response:
    call = envelope(method, params, version=None, request_id=7)
    return httpx.post(server.mcp_url, json=call.body, headers={**call.headers, **auth(server), **headers})


def modern_call(
    server: AnvilServer, name: str, arguments: dict[str, Any], user: str = "alice"
) -> httpx.Response:
    call = envelope("tools/call", {"name": name, "arguments": arguments}, request_id=9)
    return httpx.post(server.mcp_url, json=call.body, headers={**call.headers, **auth(server, user)})


@pytest.mark.parametrize("version", ALL_VERSIONS[:4])
def test_legacy_initialize_negotiates_every_handshake_version(dev_server: AnvilServer, version: str) -> None:
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    response = legacy(dev_server, "initialize", params)
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["protocolVersion"] == version
    assert result["serverInfo"]["name"] == "anvil"
    assert (
        "listChanged" not in str(result["capabilities"].get("tools", {}))
        or not result["capabilities"]["tools"]["listChanged"]
    )
    # Only what Anvil has something behind: no prompts, no resources.
    assert "prompts" not in result["capabilities"] and "resources" not in result["capabilities"]
    assert "mcp-session-id" not in response.headers


def test_legacy_and_modern_calls_continue_one_conversation(dev_server: AnvilServer) -> None:
    conversation = f"raw-{uuid.uuid4().hex[:8]}"
    first = legacy(
        dev_server,
        "tools/call",
        {"name": "ask", "arguments": {"question": "first", "conversationId": conversation}},
        **{"MCP-Protocol-Version": "2025-06-18"},
    )
    second = modern_call(dev_server, "ask", {"question": "second", "conversationId": conversation})
    assert first.status_code == 200 and second.status_code == 200
    one, two = first.json()["result"], second.json()["result"]
    assert one["structuredContent"]["turn"] == 1
    assert two["structuredContent"]["turn"] == 2
    assert two["content"][0]["text"] == "Echo: second (turn 2; previous question: first)"


def test_server_discover_answers_without_initialize(dev_server: AnvilServer) -> None:
    discover = envelope("server/discover")
    response = httpx.post(
        dev_server.mcp_url, json=discover.body, headers={**discover.headers, **auth(dev_server)}
    )
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["supportedVersions"] == ALL_VERSIONS
    assert "tools" in result["capabilities"]
    assert "prompts" not in result["capabilities"] and "resources" not in result["capabilities"]
    assert "mcp-session-id" not in response.headers


@pytest.mark.parametrize("version", ["2099-01-01", "2024-01-01", "banana"])
def test_an_unsupported_version_is_32022_naming_every_served_version(
    dev_server: AnvilServer, version: str
) -> None:
    response = legacy(dev_server, "tools/list", **{"MCP-Protocol-Version": version})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": ALL_VERSIONS, "requested": version}
    assert response.json()["id"] == 7


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_get_and_delete_on_mcp_are_405(dev_server: AnvilServer, method: str) -> None:
    headers = {**auth(dev_server), "Accept": "text/event-stream"}
    response = httpx.request(method, dev_server.mcp_url, headers=headers)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    # An HTTP+SSE (2024-11-05) client opens with this GET: the error says what to use instead.
    detail = response.json()["detail"]
    assert "HTTP+SSE transport of 2024-11-05" in detail and "anvil bridge" in detail


def test_a_browser_origin_not_allowed_is_403(dev_server: AnvilServer) -> None:
    response = legacy(dev_server, "tools/list", Origin="https://evil.example")
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"


def test_a_foreign_host_header_is_refused(dev_server: AnvilServer) -> None:
    response = legacy(dev_server, "tools/list", Host="attacker.example")
    assert response.status_code == 421


def test_no_token_is_401_with_resource_metadata(dev_server: AnvilServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = httpx.post(dev_server.mcp_url, json=body, headers={"Accept": ACCEPT})
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    metadata_url = f"{dev_server.url}/.well-known/oauth-protected-resource/mcp"
    assert challenge == f'Bearer resource_metadata="{metadata_url}"'
    document = httpx.get(metadata_url).json()
    assert document["resource"] == dev_server.mcp_url
    assert document["bearer_methods_supported"] == ["header"]
    assert httpx.get(f"{dev_server.url}/.well-known/oauth-protected-resource").json() == document


def test_a_bad_token_is_401_invalid_token(dev_server: AnvilServer) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = httpx.post(dev_server.mcp_url, json=body, headers={"Authorization": "Bearer not.a.token"})
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert "not.a.token" not in response.text


def test_a_body_over_the_limit_is_413(dev_server: AnvilServer) -> None:
    question = "x" * 70_000
    response = legacy(dev_server, "tools/call", {"name": "ask", "arguments": {"question": question}})
    assert response.status_code == 413


def test_rest_ask_continues_a_conversation(dev_server: AnvilServer) -> None:
    conversation = f"rest-{uuid.uuid4().hex[:8]}"
    url = f"{dev_server.url}/api/ask"
    first = httpx.post(
        url, json={"question": "one", "conversationId": conversation}, headers=auth(dev_server)
    )
    second = httpx.post(
        url, json={"question": "two", "conversationId": conversation}, headers=auth(dev_server)
    )
    assert first.status_code == 200 and second.status_code == 200
    assert second.json()["turn"] == 2 and "previous question: one" in second.json()["answer"]
    # The same conversation is reachable over MCP.
    third = modern_call(dev_server, "ask", {"question": "three", "conversationId": conversation})
    assert third.json()["result"]["structuredContent"]["turn"] == 3


def test_rest_errors_are_problem_documents(dev_server: AnvilServer) -> None:
    url = f"{dev_server.url}/api/ask"
    bad_id = httpx.post(url, json={"question": "q", "conversationId": "a b"}, headers=auth(dev_server))
    assert bad_id.status_code == 400
    assert bad_id.headers["content-type"] == "application/problem+json"
    assert "^[A-Za-z0-9._-]{1,64}$" in bad_id.json()["detail"]
    missing = httpx.post(url, json={"conversationId": "abc"}, headers=auth(dev_server))
    assert missing.status_code == 400 and "question" in missing.json()["detail"]
    anonymous = httpx.post(url, json={"question": "q"})
    assert anonymous.status_code == 401


def test_health_readiness_and_openapi(dev_server: AnvilServer) -> None:
    assert httpx.get(f"{dev_server.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{dev_server.url}/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"store": "ok"}
    spec = httpx.get(f"{dev_server.url}/openapi.json").json()
    assert {"/api/ask", "/healthz", "/readyz", "/mcp"} <= set(spec["paths"])


def test_a_browser_page_on_anvils_own_origin_is_accepted(dev_server: AnvilServer) -> None:
    response = legacy(dev_server, "tools/list", Origin=dev_server.url)
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("method", "params"),
    [("prompts/get", {"name": "anything"}), ("prompts/list", None), ("resources/list", None)],
)
def test_prompts_and_resources_are_not_served(
    dev_server: AnvilServer, method: str, params: dict[str, str] | None
) -> None:
    response = legacy(dev_server, method, params)
    assert response.json()["error"]["code"] == -32601
