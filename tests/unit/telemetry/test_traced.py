"""The store and the engine traced, seen through a whole ask in process on in-memory exporters:
span names and parents, attributes, metrics (an ask counted by the outcome its result names),
and the privacy rules (no token, question or answer; ids only as pseudonyms)."""

from __future__ import annotations

import json
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
from opentelemetry.trace import StatusCode
from support.asgi import client
from support.jsonrpc import envelope
from support.scripted_engine import ScriptedEngine

from app.auth.dev import DevIssuer
from app.domain.ports import Answer, Usage
from app.errors import StoreFailed, Unavailable
from app.main import create_app
from app.settings import Settings
from app.stores.memory import MemoryStore
from app.telemetry.instruments import Telemetry
from app.telemetry.traced import TracedEngine, TracedStore

pytestmark = pytest.mark.anyio

QUESTION = "What does the secret phrase zebra-lantern mean?"


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
    async with client(create_app(settings, start_telemetry=lambda _: recorded.telemetry)) as http:
        yield http, recorded, token


async def ask(http: httpx.AsyncClient, token: str, arguments: dict[str, Any]) -> httpx.Response:
    call = envelope("tools/call", {"name": "ask", "arguments": arguments})
    return await http.post(
        "/mcp", json=call.body, headers={**call.headers, "Authorization": f"Bearer {token}"}
    )


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
    async with client(create_app(settings, start_telemetry=lambda _: recorded.telemetry)) as http:
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


async def test_a_replayed_ask_is_counted_as_replayed_from_its_result(
    traced: tuple[httpx.AsyncClient, Recorded, str],
) -> None:
    http, recorded, token = traced
    arguments = {"question": "q", "conversationId": "replay-1", "clientRequestId": "retry-1"}
    first = (await ask(http, token, arguments)).json()["result"]["structuredContent"]
    again = (await ask(http, token, arguments)).json()["result"]["structuredContent"]
    assert again["note"].startswith("Replayed") and again["turn"] == first["turn"]
    assert "outcome" not in again, "the outcome is telemetry's, not part of the tool's result"
    outcomes = {attributes["anvil.ask.outcome"]: value for attributes, value in recorded.points("anvil.asks")}
    assert outcomes == {"created": 1, "replayed": 1}


async def test_a_model_engine_span_follows_the_gen_ai_conventions_with_its_token_usage() -> None:
    recorded = Recorded()
    model = ScriptedEngine(Answer("re: q", usage=Usage(input_tokens=12, output_tokens=3)), name="openai")
    engine = TracedEngine(model, recorded.telemetry, "gpt-test")
    await engine.answer("q", ())
    (span,) = recorded.finished()
    assert span.name == "chat gpt-test"
    assert span.attributes is not None
    assert span.attributes["gen_ai.provider.name"] == "openai"
    assert span.attributes["gen_ai.usage.input_tokens"] == 12
    assert "gen_ai.input.messages" not in span.attributes
    tokens = {a["gen_ai.token.type"]: n for a, n in recorded.points("gen_ai.client.token.usage")}
    assert tokens == {"input": 1, "output": 1}


async def test_a_failed_engine_call_is_an_error_span_and_a_labelled_duration() -> None:
    recorded = Recorded()
    failing = ScriptedEngine(Unavailable("the model is away"), name="failing")
    engine = TracedEngine(failing, recorded.telemetry)
    with pytest.raises(Unavailable):
        await engine.answer("q", ())
    (span,) = recorded.finished()
    assert span.name == "answer failing"
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == Unavailable.kind
    (labels, count), *_ = recorded.points("gen_ai.client.operation.duration")
    assert labels["error.type"] == Unavailable.kind and count == 1


async def test_a_store_span_carries_pseudonyms_only_when_it_records() -> None:
    recorded = Recorded()
    store = TracedStore(MemoryStore(), recorded.telemetry, "memory")
    assert await store.get("oid-1", "conv-1") is None
    (span,) = recorded.finished()
    assert span.attributes is not None
    assert span.attributes["anvil.user"] == recorded.telemetry.pseudonym("oid-1")
    assert span.attributes["anvil.conversation"] == recorded.telemetry.pseudonym("oid-1:conv-1")
    pseudonyms: list[str] = []
    off = Telemetry.off()
    off.pseudonym = pseudonyms.append
    assert await TracedStore(MemoryStore(), off, "memory").get("oid-1", "conv-1") is None
    assert pseudonyms == [], "a span that records nothing computes no keyed hash"


async def test_a_store_failure_other_than_busy_is_counted_by_its_cause() -> None:
    recorded = Recorded()

    class Full(MemoryStore):
        async def count(self, oid: str, tid: str) -> int:
            raise StoreFailed(
                "The conversation store cannot write; retry later.", cause="disk-full", remedy="x"
            )

    store = TracedStore(Full(), recorded.telemetry, "sqlite")
    with pytest.raises(StoreFailed):
        await store.count("oid-1", "tid")
    assert recorded.points("anvil.store.failures") == [
        ({"db.system.name": "sqlite", "error.type": "disk-full"}, 1)
    ]
