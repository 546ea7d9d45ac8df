"""What a request brought, read once: the header fields every layer reads (`head_of`), in one
pass per request, and the body `BodyGuard` keeps (`body_of`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.asgi import client

import app.http.received as received
from app.auth.dev import DevIssuer
from app.http.received import HEAD, RequestHead, body_of, head_of, keep_body
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio


def scope_with(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}


def test_the_fields_are_decoded_without_surrounding_whitespace_and_the_first_of_repeats_wins() -> None:
    scope = scope_with(
        [
            (b"host", b" anvil.example.com:8443\t"),
            (b"accept", b"application/json"),
            (b"accept", b"text/event-stream"),
            (b"content-type", b"application/json"),
            (b"mcp-protocol-version", b"2026-07-28 "),
            (b"origin", b"https://app.example.com"),
            (b"content-length", b"17"),
            (b"x-other", b"left alone"),
        ]
    )
    assert head_of(scope) == RequestHead(
        host="anvil.example.com:8443",
        origin="https://app.example.com",
        content_length="17",
        authorization=(),
        accept="application/json",
        content_type="application/json",
        protocol_version="2026-07-28",
    )


def test_absent_fields_have_their_defaults() -> None:
    head = head_of(scope_with([]))
    assert head == RequestHead("", None, None, (), "", "", None)


def test_every_authorization_header_is_kept_so_sign_in_can_refuse_two() -> None:
    scope = scope_with([(b"authorization", b"Bearer a "), (b"authorization", b"Bearer b")])
    assert head_of(scope).authorization == ("Bearer a", "Bearer b")


def test_the_same_pass_strips_the_values_for_every_later_reader() -> None:
    # The SDK compares its routing headers exactly (spec_fixes entry 3) and reads the scope's.
    scope = scope_with([(b"mcp-method", b" tools/call \t"), (b"mcp-name", b"ask")])
    head_of(scope)
    assert scope["headers"] == [(b"mcp-method", b"tools/call"), (b"mcp-name", b"ask")]


def test_the_head_is_read_on_the_first_call_only() -> None:
    scope = scope_with([(b"host", b"a.example")])
    first = head_of(scope)
    scope["headers"] = [(b"host", b"b.example")]
    assert head_of(scope) is first is scope[HEAD]


def test_the_kept_body_is_handed_back() -> None:
    scope = scope_with([])
    keep_body(scope, b'{"question": "q"}')
    assert body_of(scope) == b'{"question": "q"}'


@pytest.fixture
async def signed_in(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(auth_mode="dev", store="memory", answer_engine="echo", data_dir=tmp_path)
    token = DevIssuer.load_or_create(tmp_path).mint("alice")
    async with client(create_app(settings)) as http:
        http.headers["Authorization"] = f"Bearer {token}"
        yield http


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[RequestHead]:
    """Every pass over a request's headers from now on, by what it read."""
    read = received._read
    seen: list[RequestHead] = []

    def counting(scope: dict[str, Any]) -> RequestHead:
        seen.append(read(scope))
        return seen[-1]

    monkeypatch.setattr(received, "_read", counting)
    return seen


async def test_the_guard_sign_in_and_the_mcp_endpoint_share_one_pass(
    signed_in: httpx.AsyncClient, passes: list[RequestHead]
) -> None:
    params = {"name": "ask", "arguments": {"question": "What is Anvil?"}}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    headers = {"Accept": "application/json", "MCP-Protocol-Version": "2025-11-25"}
    reply = await signed_in.post("/mcp", json=request, headers=headers)
    assert reply.status_code == 200 and "Echo: What is Anvil?" in reply.text
    (head,) = passes
    assert head.authorization[0].startswith("Bearer ") and head.protocol_version == "2025-11-25"


async def test_a_rest_call_reads_its_headers_once_too(
    signed_in: httpx.AsyncClient, passes: list[RequestHead]
) -> None:
    reply = await signed_in.post("/api/ask", json={"question": "What is Anvil?"})
    assert reply.status_code == 200
    assert len(passes) == 1
