"""`CurrentSpan` records what `Tracer.start_as_current_span` records: the same span, parent,
events and status, for a block that returns, raises an error, or is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    NoOpTracerProvider,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
)

from app.telemetry.spans import CurrentSpan

Opener = Callable[[trace.Tracer, str], AbstractContextManager[trace.Span]]


def by_api(tracer: trace.Tracer, name: str) -> AbstractContextManager[trace.Span]:
    return tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes={"a": 1})


def by_helper(tracer: trace.Tracer, name: str) -> AbstractContextManager[trace.Span]:
    return CurrentSpan(tracer, name, kind=SpanKind.CLIENT, attributes={"a": 1})


def recorded(opener: Opener, body: Callable[[], None]) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("outer"):
        try:
            with opener(tracer, "inner") as span:
                assert trace.get_current_span() is span
                body()
        except BaseException:  # the outcome is what the spans say
            pass
        assert trace.get_current_span().name == "outer"  # type: ignore[attr-defined]
    return list(exporter.get_finished_spans())


def returns() -> None:
    return None


def raises() -> None:
    raise ValueError("no such thing")


def cancelled() -> None:
    raise asyncio.CancelledError


def summary(spans: list[ReadableSpan]) -> list[dict[str, Any]]:
    parents = {span.context.span_id: span.name for span in spans}
    return [
        {
            "name": span.name,
            "kind": span.kind,
            "attributes": dict(span.attributes or {}),
            "parent": parents.get(span.parent.span_id) if span.parent else None,
            "status": (span.status.status_code, span.status.description),
            "events": [
                (event.name, dict(event.attributes or {}).get("exception.type")) for event in span.events
            ],
            "ended": span.end_time is not None,
        }
        for span in spans
    ]


@pytest.mark.parametrize("body", [returns, raises, cancelled], ids=["returns", "raises", "cancelled"])
def test_the_helper_records_what_start_as_current_span_records(body: Callable[[], None]) -> None:
    ours, theirs = summary(recorded(by_helper, body)), summary(recorded(by_api, body))
    assert ours == theirs
    inner = ours[0]
    assert inner["parent"] == "outer" and inner["ended"]
    if body is raises:
        assert inner["status"] == (StatusCode.ERROR, "ValueError: no such thing")
        assert inner["events"] == [("exception", "ValueError")]
    else:
        assert inner["status"][0] is StatusCode.UNSET and inner["events"] == []


def test_with_the_no_op_tracer_the_span_is_current_and_records_nothing() -> None:
    tracer = NoOpTracerProvider().get_tracer("test")
    # A caller's traceparent, as the request span gets it: the no-op span carries its context.
    remote = SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    parent = trace.set_span_in_context(NonRecordingSpan(remote))
    with CurrentSpan(tracer, "inner", context=parent) as span:
        assert trace.get_current_span() is span
        assert span.get_span_context().trace_id == 0xABC
        assert not span.is_recording()
    assert trace.get_current_span() is trace.INVALID_SPAN
