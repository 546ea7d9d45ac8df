"""Text that JSON can carry but UTF-8 cannot (an unpaired surrogate such as `\\ud800`) in a
question, instructions or title was taken in, and the store then failed to encode it: a 500
instead of a 400 naming the field. Fixed in 0.3.0."""

from __future__ import annotations

import httpx
import pytest
from support.anvil_server import AnvilServer
from support.jsonrpc import envelope

#: A JSON text with a lone high surrogate escaped: valid JSON, not valid Unicode.
LONE = "\\ud800"


def bearer(server: AnvilServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token('mallory')}"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (f'{{"question": "why{LONE}?"}}', "question"),
        (f'{{"question": "q", "conversationId": "s-1", "instructions": "{LONE}"}}', "instructions"),
    ],
)
def test_a_lone_surrogate_over_rest_is_a_400_naming_the_field(
    dev_server: AnvilServer, body: str, field: str
) -> None:
    response = httpx.post(
        f"{dev_server.url}/api/ask",
        content=body.encode(),
        headers={**bearer(dev_server), "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    detail = response.json()["detail"]
    assert f"{field}: contains text that is not valid Unicode (an unpaired surrogate)" in detail
    assert "\ud800" not in detail and LONE not in detail
    # Nothing was stored for the conversation named.
    assert httpx.get(f"{dev_server.url}/api/conversations/s-1", headers=bearer(dev_server)).status_code == 404


def test_a_lone_surrogate_in_a_title_is_refused_too(dev_server: AnvilServer) -> None:
    response = httpx.post(
        f"{dev_server.url}/api/conversations",
        content=f'{{"title": "t{LONE}"}}'.encode(),
        headers={**bearer(dev_server), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert "title: contains text that is not valid Unicode" in response.json()["detail"]


def test_a_lone_surrogate_over_mcp_is_a_tool_error_naming_the_field(dev_server: AnvilServer) -> None:
    call = envelope("tools/call", {"name": "ask", "arguments": {"question": "why\ud800?"}}, request_id=3)
    assert LONE.encode() in call.content, "the surrogate is sent escaped, as valid JSON"
    logged_before = len(dev_server.log())
    response = httpx.post(
        dev_server.mcp_url, content=call.content, headers={**call.headers, **bearer(dev_server)}
    )
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(
        "Invalid arguments for ask: question: contains text that is not valid Unicode"
    )
    logged = dev_server.log()[logged_before:]
    assert "Traceback" not in logged and "ERROR" not in logged
