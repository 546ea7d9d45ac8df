"""The OpenAPI document promised what the server refused: schema-valid `instructions` past the
served bound got 400, a 413 was not listed, any string was a valid `cursor`, and `POST /mcp`
documented a body that `{}` satisfied (Schemathesis with every check found 6 failures in 800
cases), so a gateway validating requests against it would pass what Anvil refuses. Fixed in
0.4.2: the document tells the truth about a real `anvil serve`.

Schemathesis runs every check it has (`--checks all`) in every phase (examples, coverage,
fuzzing, stateful) against the document the server publishes, with a fixed seed and no
database of earlier runs, so that a run makes the same cases every time: it must find nothing.
Around it, what a generated run may miss: every bound says one number in the OpenAPI document,
the MCP `inputSchema` and the service; every cursor the server issues has the documented shape,
and every string of that shape is accepted; what the layers in front of every operation answer
(sign-in, Host, Origin, sizes, deadlines) is in that operation's documented responses; and the
3.0 rendering for API Management says the same.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from openapi_spec_validator.validation.validators import OpenAPIV30SpecValidator
from support.anvil_server import AnvilServer, run_anvil

from app.operations.schemas import NOT_BLANK
from app.rest.openapi30 import entra_scheme, openapi_30
from app.settings import Settings

#: Not the default (8000): the document must state the configured limit, not a constant.
MAX_QUESTION_CHARS = 1000
MAX_BODY_BYTES = 65_536
BODY_TIMEOUT_SECONDS = 2
#: Fixed, so that every run makes the same cases (`--generation-deterministic` would too, but
#: its stateful phase then never follows a link to an existing conversation).
SEED = "20260701"
#: Cases per operation in the fuzzing phase, and the stateful phase's budget; the coverage phase
#: makes its own (the boundaries of every schema) whatever this says. About 25 s in all.
EXAMPLES = 15
ACCEPT = "application/json, text/event-stream"
PROBES = {"/healthz", "/readyz"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    env = {
        "ANVIL_ANSWER_ENGINE": "retrieval",
        "ANVIL_STORE": "sqlite",
        "ANVIL_MAX_QUESTION_CHARS": str(MAX_QUESTION_CHARS),
        "ANVIL_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        "ANVIL_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT_SECONDS),
    }
    with run_anvil(tmp_path_factory.mktemp("openapi-truth"), env) as running:
        yield running


@pytest.fixture(scope="module")
def document(server: AnvilServer) -> dict[str, Any]:
    published: dict[str, Any] = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    return published


def bearer(server: AnvilServer, user: str = "truth") -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token(user)}"}


def test_schemathesis_with_every_check_in_every_phase_finds_nothing(
    server: AnvilServer, document: dict[str, Any], tmp_path: Path
) -> None:
    command = [
        str(Path(sys.executable).with_name("st")),
        "run",
        f"{server.url}/openapi.json",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        SEED,
        "--generation-database",
        "none",
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--header",
        f"Authorization: Bearer {server.token('schemathesis')}",
        "--no-color",
        "--output-truncate",
        "true",
    ]
    # In a folder of its own: no configuration file or report of the checkout is picked up.
    ran = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    report = ran.stdout + ran.stderr
    assert ran.returncode == 0 and "❌" not in report, report[-30_000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅\s+{phase} \(in", report), f"the {phase} phase did not run and pass:\n{report}"
    documented = sum(len(item) for item in document["paths"].values())
    assert re.search(rf"Tested:\s+{documented}\b", report), report


# --- one bound, one number ----------------------------------------------------------------------


def rule_of(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """The constraints on one property, looking through `anyOf` for optional ones."""
    stated = schema["properties"][name]
    (variant,) = [v for v in stated.get("anyOf", [stated]) if v.get("type") != "null"]
    return dict(variant)


def body_schema(document: dict[str, Any], path: str) -> dict[str, Any]:
    schema: dict[str, Any] = document["paths"][path]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    return schema


def query_schema(document: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    (parameter,) = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == name]
    schema: dict[str, Any] = parameter["schema"]
    return schema


def mcp(server: AnvilServer, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    reply = httpx.post(server.mcp_url, json=message, headers={**bearer(server), "Accept": ACCEPT}, timeout=30)
    assert reply.status_code == 200, reply.text
    result: dict[str, Any] = reply.json()["result"]
    return result


def test_every_text_bound_is_the_configured_one_in_the_document_the_tools_and_the_service(
    server: AnvilServer, document: dict[str, Any]
) -> None:
    tools = {tool["name"]: tool["inputSchema"] for tool in mcp(server, "tools/list")["tools"]}
    stated = {
        "ask question": (
            rule_of(body_schema(document, "/api/ask"), "question"),
            rule_of(tools["ask"], "question"),
        ),
        "ask instructions": (
            rule_of(body_schema(document, "/api/ask"), "instructions"),
            rule_of(tools["ask"], "instructions"),
        ),
        "start instructions": (
            rule_of(body_schema(document, "/api/conversations"), "instructions"),
            rule_of(tools["start_conversation"], "instructions"),
        ),
        "searchText": (
            query_schema(document, "/api/search", "searchText"),
            rule_of(tools["search"], "searchText"),
        ),
    }
    for name, (rest, tool) in stated.items():
        assert rest["maxLength"] == tool["maxLength"] == MAX_QUESTION_CHARS, name

    headers = bearer(server)
    at_limit, past_limit = "q" * MAX_QUESTION_CHARS, "q" * (MAX_QUESTION_CHARS + 1)
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        calls = {
            "ask question": lambda text: http.post("/api/ask", json={"question": text}),
            "ask instructions": lambda text: http.post(
                "/api/ask", json={"question": "q", "instructions": text}
            ),
            "start instructions": lambda text: http.post("/api/conversations", json={"instructions": text}),
            "searchText": lambda text: http.get("/api/search", params={"searchText": text}),
        }
        for name, send in calls.items():
            assert send(at_limit).is_success, name
            refused = send(past_limit)
            assert refused.status_code == 400, (name, refused.text)
            assert str(MAX_QUESTION_CHARS) in refused.json()["detail"], (name, refused.text)


def test_blank_text_is_refused_by_the_schema_as_by_the_service(document: dict[str, Any]) -> None:
    """The services refuse text that `str.strip()` empties; the documented pattern says the same
    to every regex engine that reads it (pydantic's, Python's; JSON Schema's is ECMA-262, whose
    `\\s` would differ, which is why the pattern spells the characters out)."""
    assert rule_of(body_schema(document, "/api/ask"), "question")["pattern"] == NOT_BLANK
    assert rule_of(body_schema(document, "/api/conversations"), "title")["pattern"] == NOT_BLANK
    assert query_schema(document, "/api/search", "searchText")["pattern"] == NOT_BLANK
    pattern = re.compile(NOT_BLANK)
    disagree = [
        hex(c) for c in range(sys.maxunicode + 1) if (pattern.search(chr(c)) is None) != chr(c).isspace()
    ]
    assert disagree == []


# --- the cursor's shape -------------------------------------------------------------------------


def test_every_cursor_the_server_issues_has_the_documented_shape(
    server: AnvilServer, document: dict[str, Any]
) -> None:
    shape = query_schema(document, "/api/conversations", "cursor")
    pattern, longest = re.compile(shape["pattern"]), shape["maxLength"]
    headers = bearer(server, "pages")
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        for title in ("one", "two", "three", "four"):
            assert http.post("/api/conversations", json={"title": title}).status_code == 201
        seen, cursor = [], None
        while True:
            page = http.get(
                "/api/conversations", params={"limit": 1, **({"cursor": cursor} if cursor else {})}
            )
            assert page.status_code == 200, page.text
            seen += [c["title"] for c in page.json()["conversations"]]
            cursor = page.json()["nextCursor"]
            if cursor is None:
                break
            assert pattern.fullmatch(cursor) and len(cursor) <= longest, cursor
    assert seen == ["four", "three", "two", "one"]


def test_every_string_of_the_documented_cursor_shape_is_accepted_and_no_other(
    server: AnvilServer, document: dict[str, Any]
) -> None:
    shape = query_schema(document, "/api/conversations", "cursor")
    with httpx.Client(base_url=server.url, headers=bearer(server, "cursors"), timeout=30) as http:

        @given(st.from_regex(shape["pattern"], fullmatch=True))
        @settings(
            max_examples=50,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        def accepted(cursor: str) -> None:
            assert len(cursor) <= shape["maxLength"]
            answer = http.get("/api/conversations", params={"cursor": cursor})
            assert answer.status_code == 200, (cursor, answer.text)

        accepted()
        for foreign in ("0", "not-a-cursor-we-issued", "WzEuNSwiYSJd", "1e+16~a", "nan~a", "1~" + "a" * 65):
            refused = http.get("/api/conversations", params={"cursor": foreign})
            assert refused.status_code == 400, (foreign, refused.text)
            assert "pass the nextCursor of the previous page unchanged" in refused.json()["detail"]


# --- every status an operation can answer is documented -------------------------------------------


def raw_exchange(server: AnvilServer, head: bytes, *, timeout: float = 10.0) -> int:
    """Send `head` (and nothing more) on a fresh connection; the status of the answer."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        # Refused before all of it was read: the answer is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head)
        received = b""
        deadline = time.monotonic() + timeout
        while b"\r\n" not in received and time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", received)
    assert match, received
    return int(match.group(1))


def operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if path not in PROBES
    ]


def request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    target = path.replace("{conversationId}", "c1")
    lines = [f"{method} {target} HTTP/1.1", *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def test_what_the_layers_in_front_of_every_operation_answer_is_documented(
    server: AnvilServer, document: dict[str, Any]
) -> None:
    host = server.url.removeprefix("http://")
    token = bearer(server)["Authorization"]
    json_body = {"Content-Type": "application/json", "Accept": ACCEPT}
    provoked = {
        "no token": ({"Host": host}, 401),
        "two Authorization headers": ({"Host": host, "Authorization": token, "authorization": token}, 400),
        "a foreign browser Origin": (
            {"Host": host, "Authorization": token, "Origin": "https://evil.example"},
            403,
        ),
        "a Host not served": ({"Host": "evil.example", "Authorization": token}, 421),
        "a declared body past the limit": (
            {"Host": host, "Authorization": token, "Content-Length": str(MAX_BODY_BYTES + 1), **json_body},
            413,
        ),
        "headers past the limit": ({"Host": host, "Authorization": token, "X-Padding": "p" * 40_000}, 431),
    }
    checked = 0
    for method, path in operations(document):
        documented = set(document["paths"][path][method.lower()]["responses"])
        for why, (headers, status) in provoked.items():
            head = request_head(method, path, {**headers, "Connection": "close"})
            assert raw_exchange(server, head) == status, (method, path, why)
            assert str(status) in documented, f"{method} {path} answers {status} to {why}, undocumented"
            checked += 1
    assert checked == len(provoked) * len(operations(document)) >= 54
    # A body that stops arriving gets the body deadline; the POST routes wait together.
    posts = [path for method, path in operations(document) if method == "POST"]
    headers = {"Host": host, "Authorization": token, "Content-Length": "10", **json_body}
    with ThreadPoolExecutor(len(posts)) as pool:
        statuses = pool.map(
            lambda path: raw_exchange(
                server, request_head("POST", path, headers) + b'{"q', timeout=BODY_TIMEOUT_SECONDS + 10
            ),
            posts,
        )
        assert dict(zip(posts, statuses, strict=True)) == dict.fromkeys(posts, 408)
    assert all("408" in document["paths"][path]["post"]["responses"] for path in posts)
    # Not provoked here, but answered by every operation under their conditions (a rate limit,
    # an unexpected failure, a store that does not answer or a full process).
    for method, path in operations(document):
        assert {"408", "429", "500", "503"} <= set(document["paths"][path][method.lower()]["responses"])


def test_the_mcp_body_is_one_json_rpc_request_or_notification(
    server: AnvilServer, document: dict[str, Any]
) -> None:
    schemas = document["components"]["schemas"]
    body = body_schema(document, "/mcp")
    assert body == {"$ref": "#/components/schemas/JsonRpcMessage"}
    request = schemas["JsonRpcRequest"]
    assert set(request["required"]) == {"jsonrpc", "method", "id"}
    assert set(schemas["JsonRpcNotification"]["required"]) == {"jsonrpc", "method"}
    headers = {**bearer(server), "Accept": ACCEPT}
    for message, status in (
        ({}, 400),
        ({"jsonrpc": "2.0", "id": 7}, 400),
        ({"jsonrpc": "2.0", "method": "ping", "id": None}, 400),
        ({"jsonrpc": "2.0", "method": "ping", "id": 7, "params": []}, 400),
        ({"jsonrpc": "2.0", "method": "ping", "id": 7}, 200),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, 202),
    ):
        answer = httpx.post(server.mcp_url, json=message, headers=headers, timeout=30)
        assert answer.status_code == status, (message, answer.text)
        assert str(status) in document["paths"]["/mcp"]["post"]["responses"]


# --- the document API Management imports ----------------------------------------------------------


def test_the_30_document_says_the_same_bounds_and_statuses(document: dict[str, Any]) -> None:
    converted = openapi_30(json.loads(json.dumps(document)), security=entra_scheme(Settings()))
    validate(converted, cls=OpenAPIV30SpecValidator)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert set(converted["paths"][path][method]["responses"]) == set(operation["responses"]), (
                path,
                method,
            )
    ask = body_schema(converted, "/api/ask")["properties"]
    assert ask["question"]["maxLength"] == ask["instructions"]["maxLength"] == MAX_QUESTION_CHARS
    assert ask["question"]["pattern"] == NOT_BLANK
    cursor = query_schema(converted, "/api/conversations", "cursor")
    assert cursor == query_schema(document, "/api/conversations", "cursor")


# --- what a refused argument is told --------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "arguments", "told"),
    [
        ("ask", {"question": " \t\u3000"}, "question must not be empty or only whitespace"),
        ("search", {"searchText": "\x1c"}, "searchText must not be empty or only whitespace"),
        ("start_conversation", {"title": "  "}, "title must not be empty or only whitespace"),
        ("list_conversations", {"cursor": "WzEuNSwiYSJd"}, "cursor is not one this server issued"),
        ("list_conversations", {"cursor": "1~" + "a" * 200}, "cursor is not one this server issued"),
        (
            "ask",
            {"question": "q", "instructions": "i" * 40_000},
            "instructions is longer than ANVIL_MAX_QUESTION_CHARS allows",
        ),
    ],
)
def test_a_refused_argument_is_told_the_rule_in_words(
    operation: str, arguments: dict[str, Any], told: str, tmp_path: Path
) -> None:
    from app.errors import InvalidInput
    from app.operations.catalog import OPERATIONS
    from app.settings import Settings

    (found,) = [o for o in OPERATIONS if o.name == operation]
    with pytest.raises(InvalidInput) as refused:
        found.parse(arguments, Settings(data_dir=tmp_path))
    assert told in refused.value.message
    # Neither the regex nor pydantic's number, which would not be the configured limit.
    assert "[^" not in refused.value.message and "32000" not in refused.value.message
