"""The handle every part of Anvil records through: the API's no-op when nothing is exported,
pseudonyms keyed and stable, the providers stopped once."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from app.telemetry.instruments import Telemetry


def test_off_is_the_api_no_op_and_records_nothing() -> None:
    off = Telemetry.off()
    assert isinstance(off.tracer, trace.NoOpTracer)
    with off.tracer.start_as_current_span("anything") as span:
        assert not span.is_recording() and not span.get_span_context().is_valid
    off.instruments.asks.add(1, {"anvil.ask.outcome": "created"})
    off.instruments.requests.record(0.1)
    off.shutdown()


def test_pseudonyms_are_stable_under_a_key_and_differ_across_keys() -> None:
    one = Telemetry.off(pseudonym_key=b"a" * 32)
    assert one.pseudonym("oid-1") == Telemetry.off(pseudonym_key=b"a" * 32).pseudonym("oid-1")
    assert one.pseudonym("oid-1") != Telemetry.off(pseudonym_key=b"b" * 32).pseudonym("oid-1")
    assert one.pseudonym("oid-1") != one.pseudonym("oid-2")
    assert "oid-1" not in one.pseudonym("oid-1") and len(one.pseudonym("oid-1")) == 16
    assert Telemetry.off().pseudonym("oid-1") != Telemetry.off().pseudonym("oid-1"), "random key"


def test_the_metrics_are_named_by_the_conventions() -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(
        trace.NoOpTracer(), MeterProvider(metric_readers=[reader]).get_meter("anvil"), pseudonym_key=b"k"
    )
    instruments = telemetry.instruments
    instruments.requests.record(0.2, {"http.route": "/mcp"})
    instruments.store_duration.record(0.01)
    instruments.engine_tokens.record(5)
    data = reader.get_metrics_data()
    assert data is not None
    units = {m.name: m.unit for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics}
    assert units == {
        "http.server.request.duration": "s",
        "db.client.operation.duration": "s",
        "gen_ai.client.token.usage": "{token}",
    }


def test_shutdown_stops_the_providers_once() -> None:
    calls: list[str] = []
    meter = MeterProvider().get_meter("anvil")
    telemetry = Telemetry(trace.NoOpTracer(), meter, pseudonym_key=b"k", shutdown=lambda: calls.append("x"))
    telemetry.shutdown()
    telemetry.shutdown()
    assert calls == ["x"]
