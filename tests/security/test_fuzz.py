"""Generated input against a real `anvil serve`: no 5xx, and every error in Anvil's own shapes.

Schemathesis drives every REST operation from Anvil's own OpenAPI document (valid and invalid
bodies, queries and paths); Hypothesis drives `/mcp` with generated JSON-RPC envelopes and
arguments in both protocol eras. Every run draws new cases (no seed, no database of earlier
runs); a failure prints the case that reproduces it.

Example counts are bounded, so the suite stays fast: FUZZ_EXAMPLES cases per REST operation and
generation mode (15 by default; generating Schemathesis cases, not the requests, is what costs)
and ten times as many JSON-RPC messages, which are cheap to make. For a deeper run, raise it:
`FUZZ_EXAMPLES=500 pytest tests/security/test_fuzz.py`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from support.anvil_server import AnvilServer, run_anvil
from support.jsonrpc import LEGACY, MODERN, envelope

from app.main import create_app
from app.settings import Settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "15"))
PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class Fuzzed:
    """The one server every test of the module fuzzes, a token for it, and one HTTP client:
    minting a token (a signature) and making a client (a TLS context) cost more than a request."""

    server: AnvilServer
    headers: dict[str, str]
    http: httpx.Client


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    env = {"ANVIL_ANSWER_ENGINE": "retrieval", "ANVIL_STORE": "sqlite"}
    # A connection per request, as before: no example meets a connection the server is closing.
    limits = httpx.Limits(max_keepalive_connections=0)
    with (
        run_anvil(tmp_path_factory.mktemp("fuzz"), env) as server,
        httpx.Client(timeout=30, limits=limits) as http,
    ):
        yield Fuzzed(server, {"Authorization": f"Bearer {server.token('fuzzer')}"}, http)


def rest_cases() -> list[Any]:
    """(operation, generation mode) for every REST operation of Anvil's OpenAPI document: valid
    input for each, and invalid input for those that take any."""
    document = create_app(Settings(answer_engine="echo", store="memory")).openapi()
    cases = []
    for result in schemathesis.openapi.from_dict(document).get_all_operations():
        operation = result.ok()
        # `/mcp` speaks JSON-RPC, not REST: the second test below generates its messages.
        if operation.path == "/mcp":
            continue
        declared = document["paths"][operation.path][operation.method.lower()]
        takes_input = bool(declared.get("parameters") or declared.get("requestBody"))
        for mode in GenerationMode if takes_input else [GenerationMode.POSITIVE]:
            cases.append(pytest.param(operation, mode, id=f"{operation.label} {mode.value}"))
    return cases


@pytest.mark.parametrize(("operation", "mode"), rest_cases())
def test_every_rest_operation_answers_generated_input_without_a_5xx(
    fuzzed: Fuzzed, operation: Any, mode: GenerationMode
) -> None:
    @given(operation.as_strategy(mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def check(case: Case) -> None:
        response = case.call(base_url=fuzzed.server.url, headers=fuzzed.headers, timeout=30)
        assert response.status_code < 500, response.text
        if response.status_code >= 400:
            kind = response.headers["content-type"]
            assert (kind[0] if isinstance(kind, list) else kind) == PROBLEM, response.text
            problem = response.json()
            assert problem["status"] == response.status_code and problem["detail"]

    check()


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
TOOLS = st.sampled_from(
    [
        "ask",
        "search",
        "fetch",
        "start_conversation",
        "list_conversations",
        "get_conversation",
        "delete_conversation",
        "nope",
    ]
)
ARGUMENTS = st.dictionaries(
    st.sampled_from(
        [
            "question",
            "conversationId",
            "instructions",
            "clientRequestId",
            "searchText",
            "maxResults",
            "source",
            "maxChars",
            "limit",
            "cursor",
            "title",
            "extra",
        ]
    ),
    JSON_VALUES,
    max_size=4,
)
METHODS = st.sampled_from(
    ["tools/call", "tools/list", "initialize", "ping", "prompts/list", "resources/read", "nope/nope"]
)


@st.composite
def envelopes(draw: st.DrawFn) -> tuple[Any, dict[str, str]]:
    """A JSON-RPC message, mostly well-formed, with the headers its era asks for: the envelope a
    client of that era sends, then changed as drawn (its `_meta` left out, another `jsonrpc`, an
    id of any JSON type or none, or the whole body replaced by any JSON value)."""
    modern = draw(st.booleans())
    method = draw(METHODS)
    params: Any = (
        {"name": draw(TOOLS), "arguments": draw(ARGUMENTS)}
        if method == "tools/call"
        else draw(st.none() | st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=3))
    )
    version = MODERN if modern else draw(st.sampled_from([None, LEGACY]))
    sent = envelope(method, params, version=version)
    message: Any = {**sent.body, "jsonrpc": draw(st.sampled_from(["2.0", "2.0", "1.0"]))}
    if not (modern and params is not None and draw(st.booleans())):
        message.pop("params", None)
        if params is not None:
            message["params"] = params  # as drawn, without the envelope's `_meta`
    if draw(st.integers(0, 9)):
        message["id"] = draw(st.integers() | st.text(max_size=8) | st.none() | st.booleans())
    else:
        message.pop("id", None)
    if not draw(st.integers(0, 9)):
        message = draw(JSON_VALUES)  # anything at all
    headers = sent.headers
    if not headers.get("Mcp-Name", "").isascii():
        del headers["Mcp-Name"]  # a header value is ASCII: a client could not send this one
    return message, headers


@given(envelopes())
@settings(
    max_examples=EXAMPLES * 10,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_the_mcp_endpoint_answers_generated_messages_without_a_5xx(
    fuzzed: Fuzzed, envelope: tuple[Any, dict[str, str]]
) -> None:
    message, headers = envelope
    response = fuzzed.http.post(
        fuzzed.server.mcp_url, content=json.dumps(message).encode(), headers={**headers, **fuzzed.headers}
    )
    assert response.status_code < 500, response.text
    kind = response.headers.get("content-type", "")
    if response.status_code == 202:
        return
    if kind.startswith(PROBLEM):
        assert response.json()["detail"]
        return
    assert kind.startswith(("application/json", "text/event-stream")), (response.status_code, kind)
    if kind.startswith("application/json"):
        reply = response.json()
        assert isinstance(reply, dict) and reply.get("jsonrpc") == "2.0"
        assert ("result" in reply) != ("error" in reply), reply
        if "error" in reply:
            assert isinstance(reply["error"]["code"], int) and reply["error"]["message"]
