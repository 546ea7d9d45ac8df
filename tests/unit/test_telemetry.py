"""Telemetry in process, on in-memory exporters: span names and parents, attributes, metrics, and
the privacy rules (no token, question or answer; ids only as pseudonyms)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.asgi import client

from app.auth.dev import DevIssuer
from app.main import create_app
from app.settings import Settings
from app.telemetry.logs import JsonFormatter
from app.telemetry.setup import Telemetry, wanted

pytestmark = pytest.mark.anyio

QUESTION = "What does the secret phrase zebra-lantern mean?"
MODERN = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "ask",
}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


class Recorded:
    """A `Telemetry` on local providers, and what it recorded."""

    def __init__(self, capture_content: bool = False) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[self.metrics])
        self.telemetry = Telemetry(
            tracer_provider.get_tracer("anvil"),
            meter_provider.get_meter("anvil"),
            pseudonym_key=b"k" * 32,
            capture_content=capture_content,
        )

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        data = self.metrics.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            value = getattr(point, "value", None)
                            found.append(
                                (dict(point.attributes or {}), value if value is not None else point.count)
                            )
        return found


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Recorded, str]]:
    recorded = Recorded()
    settings = Settings(store="memory", answer_engine="echo", data_dir=tmp_path, access_log=False)
    token = DevIssuer.load_or_create(tmp_path).mint("alice")
    async with client(create_app(settings, telemetry=recorded.telemetry)) as http:
        yield http, recorded, token


async def ask(http: httpx.AsyncClient, token: str, arguments: dict[str, Any]) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ask", "arguments": arguments, "_meta": ENVELOPE},
    }
    return await http.post("/mcp", json=body, headers={**MODERN, "Authorization": f"Bearer {token}"})


async def test_one_ask_is_one_trace_of_request_sign_in_store_and_engine_spans(
    traced: tuple[httpx.AsyncClient, Recorded, str],
) -> None:
    http, recorded, token = traced
    response = await ask(http, token, {"question": QUESTION, "conversationId": "traced-1"})
    assert response.json()["result"]["isError"] is False
    spans = recorded.finished()
    by_name = {span.name: span for span in spans}
    assert set(by_name) >= {
        "POST /mcp",
        "sign_in",
        "get conversations",
        "count conversations",
        "create conversations",
        "answer echo",
    }
    server = by_name["POST /mcp"]
    assert {span.context.trace_id for span in spans} == {server.context.trace_id}
    assert server.parent is None
    for name in ("sign_in", "get conversations", "create conversations", "answer echo"):
        assert by_name[name].parent is not None and by_name[name].parent.span_id == server.context.span_id
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/mcp"
    assert server.attributes["http.response.status_code"] == 200
    store = by_name["create conversations"].attributes or {}
    assert store["db.system.name"] == "other_sql" or store["db.system.name"]
    assert store["db.operation.name"] == "create"
    oid = jwt.decode(token, options={"verify_signature": False})["oid"]
    assert by_name["sign_in"].attributes == {
        "anvil.sign_in.outcome": "signed_in",
        "anvil.user": recorded.telemetry.pseudonym(oid),
    }


async def test_no_span_holds_a_token_a_question_an_answer_or_an_id(
    traced: tuple[httpx.AsyncClient, Recorded, str],
) -> None:
    http, recorded, token = traced
    answer = (await ask(http, token, {"question": QUESTION, "conversationId": "private-1"})).json()
    exported = json.dumps([json.loads(span.to_json()) for span in recorded.finished()])
    for secret in (
        token,
        QUESTION,
        "zebra-lantern",
        answer["result"]["structuredContent"]["answer"],
        "private-1",
    ):
        assert secret not in exported
    assert '"alice"' not in exported


async def test_content_capture_puts_the_question_and_answer_on_the_engine_span(tmp_path: Path) -> None:
    recorded = Recorded(capture_content=True)
    settings = Settings(store="memory", answer_engine="echo", data_dir=tmp_path, access_log=False)
    token = DevIssuer.load_or_create(tmp_path).mint("alice")
    async with client(create_app(settings, telemetry=recorded.telemetry)) as http:
        await ask(http, token, {"question": QUESTION})
    (engine,) = [span for span in recorded.finished() if span.name == "answer echo"]
    assert engine.attributes is not None
    assert engine.attributes["gen_ai.input.messages"] == QUESTION
    assert engine.attributes["gen_ai.output.messages"] == f"Echo: {QUESTION}"


async def test_metrics_count_asks_by_outcome_turns_and_sign_in_failures(
    traced: tuple[httpx.AsyncClient, Recorded, str],
) -> None:
    http, recorded, token = traced
    await ask(http, token, {"question": "one", "conversationId": "m-1"})
    await ask(http, token, {"question": "two", "conversationId": "m-1"})
    await ask(http, token, {"question": "three"})
    await ask(http, token, {"question": "bad", "conversationId": "not valid!"})
    await http.post("/api/ask", json={"question": "q"})  # no token
    outcomes = {attributes["anvil.ask.outcome"]: value for attributes, value in recorded.points("anvil.asks")}
    assert outcomes == {"created": 1, "continued": 1, "one_shot": 1}, "a refused argument never reaches ask"
    assert sum(value for _, value in recorded.points("anvil.turns")) == 2
    assert recorded.points("anvil.sign_in.failures") == [({"error.type": "missing_token"}, 1)]
    routes = {
        (a["http.route"], a["http.response.status_code"]): n
        for a, n in recorded.points("http.server.request.duration")
    }
    assert routes[("/mcp", 200)] == 4
    assert routes[("/api/ask", 401)] == 1
    operations = {a["db.operation.name"] for a, _ in recorded.points("db.client.operation.duration")}
    assert operations >= {"get", "create", "replace", "count"}


async def test_a_refused_ask_is_counted_by_its_reason(
    traced: tuple[httpx.AsyncClient, Recorded, str],
) -> None:
    http, recorded, token = traced
    await ask(http, token, {"question": "q", "conversationId": "r-1", "instructions": "be brief"})
    await ask(http, token, {"question": "q", "conversationId": "r-1", "instructions": "be long"})
    refused = [a for a, _ in recorded.points("anvil.asks") if a["anvil.ask.outcome"] == "refused"]
    assert refused == [{"anvil.ask.outcome": "refused", "error.type": "conflict"}]


async def test_rest_routes_are_recorded_by_their_template(
    traced: tuple[httpx.AsyncClient, Recorded, str],
) -> None:
    http, recorded, token = traced
    await http.get("/api/conversations/some-private-id", headers={"Authorization": f"Bearer {token}"})
    (server,) = [span for span in recorded.finished() if span.name.startswith("GET ")]
    assert server.name == "GET /api/conversations/{conversationId}"
    assert "some-private-id" not in server.to_json()


def test_json_log_lines_carry_the_trace_of_their_span() -> None:
    recorded = Recorded()
    formatter = JsonFormatter()
    record = logging.LogRecord("anvil.test", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    plain = json.loads(formatter.format(record))
    assert plain["message"] == "hello world" and "trace_id" not in plain
    with recorded.telemetry.tracer.start_as_current_span("outer") as span:
        inside = json.loads(formatter.format(record))
    assert inside["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert inside["span_id"] == f"{span.get_span_context().span_id:016x}"
    assert inside["level"] == "INFO" and inside["logger"] == "anvil.test"


def test_telemetry_is_wanted_only_when_an_exporter_is_configured() -> None:
    assert not wanted({})
    assert not wanted({"OTEL_SERVICE_NAME": "anvil"})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert wanted({"APPLICATIONINSIGHTS_CONNECTION_STRING": "InstrumentationKey=x"})


def test_without_an_exporter_no_part_of_the_sdk_is_imported(tmp_path: Path) -> None:
    program = (
        "import sys\n"
        "from app.main import create_app\n"
        "from app.settings import Settings\n"
        f"create_app(Settings(store='memory', answer_engine='echo', data_dir={str(tmp_path)!r}))\n"
        "prefixes = ('opentelemetry.sdk', 'opentelemetry.exporter', 'azure.monitor')\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(prefixes))\n"
        "print(loaded)\n"
    )
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if not k.startswith(("OTEL_", "APPLICATIONINSIGHTS_", "ANVIL_"))
    }
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, check=True)
    assert ran.stdout.strip() == "[]"
