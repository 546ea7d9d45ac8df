"""RequestGuard and BodyGuard: Host, Origin, method and body size checks before any route (sign-in
sits between the two stages in the app; not here; the protocol version is the MCP endpoint's).
The body's deadline is the front door's: tests/unit/serve/test_frontdoor.py and
tests/integration/test_front_door.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from app.http.guard import BodyGuard, RequestGuard, matches

pytestmark = pytest.mark.anyio

MAX_BODY = 1024
ALL_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]


async def echo_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers with the method, path and the exact body it received."""
    body = bytearray()
    if scope["method"] in ("POST", "PUT", "PATCH"):
        while True:
            message = await receive()
            body.extend(message.get("body", b""))
            if not message.get("more_body", False):
                break
    payload = {"method": scope["method"], "path": scope["path"], "body": body.decode("latin-1")}
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


def client(
    *,
    hosts: tuple[str, ...] = ("127.0.0.1:*", "localhost:*"),
    origins: tuple[str, ...] = ("https://app.example.com",),
    base_url: str = "http://127.0.0.1:8000",
) -> httpx.AsyncClient:
    guard = RequestGuard(
        BodyGuard(echo_app, max_body_bytes=MAX_BODY),
        allowed_hosts=hosts,
        allowed_origins=origins,
        max_body_bytes=MAX_BODY,
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url=base_url)


def assert_problem(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status
    assert isinstance(problem["detail"], str)
    assert problem["detail"]
    return dict(problem)


# --- matches() ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "patterns", "expected"),
    [
        ("example.com", ["example.com"], True),
        ("example.com:8000", ["example.com"], False),
        ("example.com", ["example.com:*"], True),
        ("example.com:8443", ["example.com:*"], True),
        ("example.com:", ["example.com:*"], False),
        ("example.com:abc", ["example.com:*"], False),
        ("example.com:80:90", ["example.com:*"], False),
        ("example.com.evil.net", ["example.com:*"], False),
        ("example.comx:80", ["example.com:*"], False),
        ("[::1]:8000", ["[::1]:*"], True),
        ("anything.at.all:1", ["*"], True),
        ("", ["*"], True),
        ("", ["example.com:*"], False),
        ("example.com", [], False),
        ("b.example.com", ["a.example.com", "b.example.com"], True),
        ("http://localhost:3000", ["http://localhost:*"], True),
        ("https://app.example.com", ["https://app.example.com"], True),
        ("https://app.example.com.evil", ["https://app.example.com"], False),
        ("null", ["https://app.example.com"], False),
    ],
)
def test_matches(value: str, patterns: list[str], expected: bool) -> None:
    assert matches(value, patterns) is expected


# --- Host --------------------------------------------------------------------------------------


async def test_allowed_host_reaches_the_app() -> None:
    async with client() as http:
        response = await http.post("/api/ask", content=b"{}")
    assert response.status_code == 200
    assert response.json()["path"] == "/api/ask"


@pytest.mark.parametrize("path", ["/api/ask", "/mcp", "/"])
async def test_other_host_is_refused_with_421(path: str) -> None:
    async with client() as http:
        response = await http.post(path, content=b"{}", headers={"Host": "evil.example.net"})
    problem = assert_problem(response, 421)
    assert "ANVIL_ALLOWED_HOSTS" in str(problem["detail"])


async def test_any_port_pattern_accepts_the_bare_host_and_any_port() -> None:
    async with client(hosts=("anvil.example.com:*",), base_url="https://anvil.example.com") as http:
        bare = await http.post("/api/ask", content=b"{}")
        with_port = await http.post("/api/ask", content=b"{}", headers={"Host": "anvil.example.com:8443"})
        other = await http.post("/api/ask", content=b"{}", headers={"Host": "anvil.example.org"})
    assert bare.request.headers["host"] == "anvil.example.com"
    assert bare.status_code == 200
    assert with_port.status_code == 200
    assert other.status_code == 421


async def test_exact_host_pattern_refuses_other_ports() -> None:
    async with client(hosts=("anvil.example.com",), base_url="https://anvil.example.com") as http:
        bare = await http.post("/api/ask", content=b"{}")
        with_port = await http.post("/api/ask", content=b"{}", headers={"Host": "anvil.example.com:8443"})
    assert bare.status_code == 200
    assert with_port.status_code == 421


async def test_star_accepts_any_host() -> None:
    async with client(hosts=("*",)) as http:
        response = await http.post("/api/ask", content=b"{}", headers={"Host": "whatever.example"})
    assert response.status_code == 200


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_probes_skip_the_host_check(path: str) -> None:
    async with client() as http:
        response = await http.get(path, headers={"Host": "10.0.0.7:8000", "Origin": "https://evil.example"})
    assert response.status_code == 200
    assert response.json()["path"] == path


# --- Origin ------------------------------------------------------------------------------------


async def test_request_without_origin_is_accepted() -> None:
    async with client() as http:
        response = await http.post("/mcp", content=b"{}")
    assert "origin" not in response.request.headers
    assert response.status_code == 200


async def test_allowed_origin_is_accepted() -> None:
    async with client() as http:
        response = await http.post("/mcp", content=b"{}", headers={"Origin": "https://app.example.com"})
    assert response.status_code == 200


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://app.example.com"])
async def test_other_origin_is_refused_with_403(origin: str) -> None:
    async with client() as http:
        response = await http.post("/mcp", content=b"{}", headers={"Origin": origin})
    problem = assert_problem(response, 403)
    assert "ANVIL_ALLOWED_ORIGINS" in str(problem["detail"])


# --- method on /mcp ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
async def test_mcp_only_accepts_post(method: str) -> None:
    async with client() as http:
        response = await http.request(method, "/mcp")
    assert_problem(response, 405)
    assert response.headers["allow"] == "POST"


async def test_get_on_other_paths_reaches_the_app() -> None:
    async with client() as http:
        response = await http.get("/api/conversations")
    assert response.status_code == 200
    assert response.json()["method"] == "GET"


# --- body size ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/mcp", "/api/ask"])
async def test_declared_body_over_the_limit_is_refused_with_413(path: str) -> None:
    async with client() as http:
        response = await http.post(path, content=b"x" * (MAX_BODY + 1))
    assert response.request.headers["content-length"] == str(MAX_BODY + 1)
    problem = assert_problem(response, 413)
    assert str(MAX_BODY) in str(problem["detail"])


async def test_streamed_body_over_the_limit_is_refused_with_413() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"y" * 300

    async with client() as http:
        response = await http.post("/api/ask", content=chunks())
    assert "content-length" not in response.request.headers
    assert_problem(response, 413)


async def test_body_at_the_limit_reaches_the_app_intact() -> None:
    body = bytes(range(256)) * (MAX_BODY // 256)
    assert len(body) == MAX_BODY
    async with client() as http:
        response = await http.post("/api/ask", content=body)
    assert response.status_code == 200
    assert response.json()["body"].encode("latin-1") == body


async def test_streamed_body_under_the_limit_reaches_the_app_intact() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"question": '
        yield b'"What is Anvil?"}'

    async with client() as http:
        response = await http.post("/api/ask", content=chunks())
    assert response.status_code == 200
    assert response.json()["body"] == '{"question": "What is Anvil?"}'


# --- MCP-Protocol-Version ----------------------------------------------------------------------


@pytest.mark.parametrize("version", ALL_VERSIONS)
async def test_known_protocol_versions_pass_through(version: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    async with client() as http:
        response = await http.post("/mcp", content=body, headers={"MCP-Protocol-Version": version})
    assert response.status_code == 200
    assert response.json()["body"] == body


async def test_protocol_version_header_is_only_checked_on_mcp() -> None:
    async with client() as http:
        response = await http.post("/api/ask", content=b"{}", headers={"MCP-Protocol-Version": "2099-01-01"})
    assert response.status_code == 200


async def test_header_values_reach_the_app_without_surrounding_whitespace() -> None:
    seen: dict[str, str] = {}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.update({k.decode(): v.decode() for k, v in scope["headers"]})
        await PlainTextResponse("ok")(scope, receive, send)

    guard = RequestGuard(
        BodyGuard(app, max_body_bytes=1024),
        allowed_hosts=["*"],
        allowed_origins=[],
        max_body_bytes=1024,
    )
    transport = httpx.ASGITransport(app=guard)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
        response = await client.post("/mcp", content=b"{}", headers={"Mcp-Name": "  ask \t"})
    assert response.status_code == 200
    assert seen["mcp-name"] == "ask"


@pytest.mark.parametrize("chunks_first", [0, 1, 2], ids=["before any chunk", "after one", "after two"])
async def test_a_connection_that_ends_before_its_body_is_whole_never_reaches_the_route(
    chunks_first: int,
) -> None:
    # The front door's body deadline, or a client that left: the route must not run on part of a
    # body, and the record (access log, metrics) gets the 408 the client was sent.
    reached = False

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal reached
        reached = True

    messages: list[dict[str, object]] = [
        {"type": "http.request", "body": b'{"question"', "more_body": True},
        {"type": "http.request", "body": b': "x"', "more_body": True},
    ][:chunks_first]
    messages.append({"type": "http.disconnect"})

    async def receive() -> dict[str, object]:
        return messages.pop(0)

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    guard = BodyGuard(app, max_body_bytes=1024)
    scope = {"type": "http", "method": "POST", "path": "/api/ask", "headers": []}
    await guard(scope, receive, send)  # type: ignore[arg-type]
    assert not reached
    assert messages == []
    assert sent[0]["status"] == 408
    assert json.loads(sent[1]["body"])["type"].endswith("/timeout")  # type: ignore[arg-type]


async def test_a_body_in_pieces_past_the_limit_is_refused_without_reading_the_rest() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("the route ran")

    pieces = [{"type": "http.request", "body": b"x" * 600, "more_body": True} for _ in range(5)]

    async def receive() -> dict[str, object]:
        return pieces.pop(0)

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/api/ask", "headers": []}
    await BodyGuard(app, max_body_bytes=1024)(scope, receive, send)  # type: ignore[arg-type]
    assert sent[0]["status"] == 413
    assert len(pieces) == 3  # two pieces read: past the limit
