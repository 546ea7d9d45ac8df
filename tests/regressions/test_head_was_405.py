"""`HEAD /healthz` (and HEAD on every other path GET serves) was answered 405, so a monitor probing
with HEAD saw the service as broken. Fixed in 0.4.2: HEAD answers as GET does, without a body.
Checked over raw sockets to a real server (a client library could hide body bytes a server sent
by mistake)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import httpx
import pytest
from support.anvil_server import AnvilServer

READ_TIMEOUT = 10.0
#: Headers that may differ between two answers to the same request.
VARYING = frozenset({"date"})


def exchange(server: AnvilServer, method: str, path: str, **headers: str) -> tuple[str, list[str], bytes]:
    """Send one request with `Connection: close`; the status line, the header lines (lower-case
    names) and every byte the server sent after them before closing."""
    parts = urlsplit(server.url)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}", "Connection: close"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    received = bytearray()
    with socket.create_connection((parts.hostname, parts.port), timeout=READ_TIMEOUT) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        while chunk := sock.recv(65_536):
            received.extend(chunk)
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    status, *fields = head.decode("latin-1").split("\r\n")
    return status, sorted(_lower_name(field) for field in fields), body


def _lower_name(field: str) -> str:
    name, _, value = field.partition(":")
    return f"{name.lower()}:{value}"


def without_varying(fields: list[str]) -> list[str]:
    return [field for field in fields if field.split(":", 1)[0] not in VARYING]


def bearer(server: AnvilServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token('head-user')}"}


@pytest.mark.parametrize(
    "path",
    [
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ],
)
def test_head_answers_as_get_does_without_a_body(dev_server: AnvilServer, path: str) -> None:
    get_status, get_fields, get_body = exchange(dev_server, "GET", path)
    head_status, head_fields, head_body = exchange(dev_server, "HEAD", path)
    assert get_status == "HTTP/1.1 200 OK" and get_body
    assert head_status == get_status
    assert without_varying(head_fields) == without_varying(get_fields)
    assert f"content-length: {len(get_body)}" in head_fields
    assert head_body == b""


@pytest.mark.parametrize("path", ["/api/conversations", "/api/conversations/never-created"])
def test_head_on_a_rest_read_answers_as_get_does(dev_server: AnvilServer, path: str) -> None:
    headers = bearer(dev_server)
    get_status, get_fields, get_body = exchange(dev_server, "GET", path, **headers)
    head_status, head_fields, head_body = exchange(dev_server, "HEAD", path, **headers)
    assert head_status == get_status and get_body
    assert without_varying(head_fields) == without_varying(get_fields)
    assert head_body == b""


def test_head_without_a_token_is_refused_as_get_is(dev_server: AnvilServer) -> None:
    get_status, get_fields, _ = exchange(dev_server, "GET", "/api/conversations")
    head_status, head_fields, head_body = exchange(dev_server, "HEAD", "/api/conversations")
    assert get_status.startswith("HTTP/1.1 401 ")
    assert (head_status, without_varying(head_fields)) == (get_status, without_varying(get_fields))
    assert head_body == b""


def test_head_where_get_is_not_served_is_405(dev_server: AnvilServer) -> None:
    status, fields, body = exchange(dev_server, "HEAD", "/api/ask", **bearer(dev_server))
    assert status.startswith("HTTP/1.1 405 ") and "allow: POST" in fields and body == b""
    status, fields, body = exchange(dev_server, "HEAD", "/mcp", **bearer(dev_server))
    assert status.startswith("HTTP/1.1 405 ") and "allow: POST" in fields and body == b""


def test_the_allow_header_of_a_probe_names_head(dev_server: AnvilServer) -> None:
    response = httpx.post(f"{dev_server.url}/healthz")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD"


def test_head_routes_stay_out_of_the_openapi_document(dev_server: AnvilServer) -> None:
    document = httpx.get(f"{dev_server.url}/openapi.json").json()
    methods = {method for operations in document["paths"].values() for method in operations}
    assert "head" not in methods
