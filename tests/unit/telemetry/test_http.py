"""One server span, one duration and one access log line per request, recorded by route template."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from app.telemetry.http import RequestTelemetry
from app.telemetry.instruments import Telemetry
from app.telemetry.logs import JsonFormatter

pytestmark = pytest.mark.anyio

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"


async def item(request: Request) -> Response:
    if request.path_params["item_id"] == "crash":
        raise RuntimeError("the handler failed")
    return PlainTextResponse("ok")


async def mcp(request: Request) -> Response:
    return PlainTextResponse("mcp")


ROUTER = Router([Route("/mcp", mcp, methods=["POST"]), Route("/items/{item_id}", item)])


class Refusing:
    """Answers 401 before routing, as sign-in does, for requests without a token."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not any(name == b"authorization" for name, _ in scope["headers"]):
            await PlainTextResponse("sign in", status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class Recorded:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.telemetry = Telemetry(
            tracer_provider.get_tracer("anvil"),
            MeterProvider(metric_readers=[self.metrics]).get_meter("anvil"),
            pseudonym_key=b"k" * 32,
        )

    def span(self) -> ReadableSpan:
        (span,) = self.spans.get_finished_spans()
        return span

    def durations(self) -> list[dict[str, Any]]:
        data = self.metrics.get_metrics_data()
        return [
            dict(point.attributes or {})
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "http.server.request.duration"
            for point in metric.data.data_points
        ]


def requests_of(telemetry: Telemetry, *, access_log: bool = False) -> httpx.AsyncClient:
    app = RequestTelemetry(Refusing(ROUTER), telemetry=telemetry, access_log=access_log, routes=ROUTER.routes)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://anvil.test")


@pytest.fixture
async def recorded() -> AsyncIterator[tuple[httpx.AsyncClient, Recorded]]:
    recording = Recorded()
    async with requests_of(recording.telemetry) as http:
        yield http, recording


SIGNED_IN = {"Authorization": "Bearer x"}


async def test_a_request_is_one_server_span_named_by_its_route_template(
    recorded: tuple[httpx.AsyncClient, Recorded],
) -> None:
    http, recording = recorded
    assert (await http.get("/items/private-id-1", headers=SIGNED_IN)).status_code == 200
    span = recording.span()
    assert span.name == "GET /items/{item_id}" and span.kind is SpanKind.SERVER
    assert span.attributes == {
        "http.request.method": "GET",
        "url.scheme": "http",
        "http.route": "/items/{item_id}",
        "http.response.status_code": 200,
    }
    assert "private-id-1" not in span.to_json()
    assert recording.durations() == [
        {"http.request.method": "GET", "http.route": "/items/{item_id}", "http.response.status_code": 200}
    ]


async def test_a_request_refused_before_routing_is_recorded_by_the_route_it_was_for(
    recorded: tuple[httpx.AsyncClient, Recorded],
) -> None:
    http, recording = recorded
    assert (await http.post("/mcp")).status_code == 401
    assert recording.span().name == "POST /mcp"
    assert (await http.get("/nowhere")).status_code == 401
    assert [d["http.route"] for d in recording.durations()] == ["/mcp", "other"]


async def test_a_crash_is_an_error_span_with_the_status_the_client_got(
    recorded: tuple[httpx.AsyncClient, Recorded],
) -> None:
    http, recording = recorded
    assert (await http.get("/items/crash", headers=SIGNED_IN)).status_code == 500
    span = recording.span()
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "500"
    assert recording.durations()[0]["error.type"] == "500"


async def test_a_caller_traceparent_makes_the_server_span_its_child(
    recorded: tuple[httpx.AsyncClient, Recorded],
) -> None:
    http, recording = recorded
    parent = f"00-{CALLER_TRACE}-b7ad6b7169203331-01"
    await http.get("/items/1", headers={**SIGNED_IN, "traceparent": parent})
    span = recording.span()
    assert f"{span.context.trace_id:032x}" == CALLER_TRACE
    assert span.parent is not None and f"{span.parent.span_id:016x}" == "b7ad6b7169203331"


async def test_an_unknown_method_is_recorded_as_other(recorded: tuple[httpx.AsyncClient, Recorded]) -> None:
    http, recording = recorded
    await http.request("BREW", "/items/1", headers=SIGNED_IN)
    assert recording.durations()[0]["http.request.method"] == "_OTHER"


async def test_the_access_log_line_is_written_inside_the_span_and_carries_its_trace() -> None:
    recording = Recorded()
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("anvil.access")
    access.addHandler(handler)
    level, access.level = access.level, logging.INFO
    try:
        async with requests_of(recording.telemetry, access_log=True) as http:
            await http.get("/items/7", headers=SIGNED_IN)
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    (line,) = [json.loads(text) for text in lines.getvalue().splitlines()]
    assert line["message"].startswith("GET /items/{item_id} 200 ")
    assert line["http.route"] == "/items/{item_id}" and line["http.response.status_code"] == 200
    span = recording.span().get_span_context()
    assert (line["trace_id"], line["span_id"]) == (f"{span.trace_id:032x}", f"{span.span_id:016x}")


async def test_with_telemetry_off_requests_pass_unrecorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="anvil.access")
    async with requests_of(Telemetry.off()) as http:
        assert (await http.get("/items/1", headers=SIGNED_IN)).text == "ok"
        assert (await http.get("/items/crash", headers=SIGNED_IN)).status_code == 500
    assert caplog.records == []
