"""A request carrying two Authorization headers was signed in with the first one, whatever the
second said. Fixed in 0.3.0: it is refused with a 400 asking for exactly one."""

from __future__ import annotations

import httpx
import pytest
from support.anvil_server import AnvilServer


@pytest.mark.parametrize("path", ["/api/ask", "/mcp"])
def test_two_authorization_headers_are_refused(dev_server: AnvilServer, path: str) -> None:
    token = dev_server.token("alice")
    headers = [
        ("Authorization", f"Bearer {token}"),
        ("Authorization", f"Bearer {dev_server.token('bob')}"),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ]
    response = httpx.post(f"{dev_server.url}{path}", content=b'{"question": "who am I?"}', headers=headers)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == "The request carries 2 Authorization headers: send exactly one."
    assert token not in response.text
