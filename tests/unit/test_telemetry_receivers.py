"""The local telemetry receivers decode what the real OpenTelemetry and Azure Monitor exporters send."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.monitor.opentelemetry.exporter import (
    AzureMonitorLogExporter,
    AzureMonitorMetricExporter,
    AzureMonitorTraceExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, StatusCode
from support.telemetry_receivers import (
    AZURE_EXPORTER_QUIET_ENV,
    AzureIngestion,
    OtlpReceiver,
    running_azure_ingestion,
    running_otlp_receiver,
)

RESOURCE = Resource.create({"service.name": "anvil-test", "deployment.environment": "unit"})
#: Long enough that only force_flush/shutdown exports (no timer export races the assertions).
NEVER_MS = 3_600_000


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    """A running OTLP/HTTP receiver."""
    with running_otlp_receiver() as receiver:
        yield receiver


@pytest.fixture
def quiet_azure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No side traffic to Microsoft from the exporter; its offline storage (when on) under tmp_path."""
    for name, value in AZURE_EXPORTER_QUIET_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("APPLICATIONINSIGHTS_CONNECTION_STRING", "APPLICATIONINSIGHTS_AUTHENTICATION_STRING"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "azure-storage"


@pytest.fixture
def azure(quiet_azure: Path) -> Iterator[AzureIngestion]:
    """A running Azure Monitor ingestion endpoint (plain HTTP), the exporter kept quiet."""
    with running_azure_ingestion() as receiver:
        yield receiver


def tracer_provider(exporter: Any) -> TracerProvider:
    """A local provider (never the global one) that exports each span as it ends."""
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def azure_tracer_provider(**kwargs: Any) -> TracerProvider:
    """A local provider with an Azure Monitor trace exporter told about it.

    The exporter adds an `_OTELRESOURCE_` metric envelope to each batch from its tracer provider's
    resource, which is the global provider unless it is given `tracer_provider`.
    """
    provider = TracerProvider(resource=RESOURCE)
    exporter = AzureMonitorTraceExporter(tracer_provider=provider, **kwargs)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


# --- OTLP -------------------------------------------------------------------------------------------------


def test_otlp_spans_are_decoded_with_ids_attributes_and_resource(otlp: OtlpReceiver) -> None:
    provider = tracer_provider(OTLPSpanExporter(endpoint=otlp.endpoint("traces"), timeout=5))
    tracer = provider.get_tracer("anvil.tests", "1.0")
    with (
        tracer.start_as_current_span(
            "parent", kind=SpanKind.SERVER, attributes={"http.route": "/mcp"}
        ) as parent,
        tracer.start_as_current_span("child", attributes={"n": 3, "ok": True, "ratio": 0.5}) as child,
    ):
        child.add_event("found", {"tags": ["a", "b"]})
        child.set_status(StatusCode.ERROR, "broken")
    provider.shutdown()

    assert otlp.wait_for(lambda r: len(r.spans()) == 2, timeout=5)
    by_name = {span.name: span for span in otlp.spans()}
    root, leaf = by_name["parent"], by_name["child"]
    assert root.trace_id == leaf.trace_id == format(parent.get_span_context().trace_id, "032x")
    assert root.span_id == format(parent.get_span_context().span_id, "016x")
    assert leaf.span_id == format(child.get_span_context().span_id, "016x")
    assert root.parent_span_id == ""
    assert leaf.parent_span_id == root.span_id
    assert root.kind == 2  # SPAN_KIND_SERVER
    assert leaf.kind == 1  # SPAN_KIND_INTERNAL
    assert root.attributes == {"http.route": "/mcp"}
    assert leaf.attributes == {"n": 3, "ok": True, "ratio": 0.5}
    assert leaf.events == [("found", {"tags": ["a", "b"]})]
    assert leaf.status_code == 2 and leaf.status_message == "broken"
    assert root.resource["service.name"] == "anvil-test"
    assert root.resource["deployment.environment"] == "unit"
    assert root.scope == "anvil.tests"
    assert otlp.spans("child") == [leaf]
    paths = [path for path, _ in otlp.raw_bodies()]
    assert set(paths) == {"/v1/traces"}
    assert all(h["content-type"] == "application/x-protobuf" for h in otlp.headers())
    assert any(b"/mcp" in body for _, body in otlp.raw_bodies())


def test_otlp_gzip_bodies_are_decompressed(otlp: OtlpReceiver) -> None:
    exporter = OTLPSpanExporter(endpoint=otlp.endpoint("traces"), compression=Compression.Gzip, timeout=5)
    provider = tracer_provider(exporter)
    with provider.get_tracer("anvil.tests").start_as_current_span(
        "zipped", attributes={"secret.marker": "xyzzy"}
    ):
        pass
    provider.shutdown()

    assert otlp.wait_for(lambda r: r.spans("zipped") != [], timeout=5)
    assert otlp.headers()[0]["content-encoding"] == "gzip"
    assert b"xyzzy" in otlp.raw_bodies()[0][1]
    assert otlp.spans("zipped")[0].attributes == {"secret.marker": "xyzzy"}


def test_otlp_over_tls_with_the_receivers_authority(monkeypatch: pytest.MonkeyPatch) -> None:
    # requests lets these variables override a session's own `verify`, which is how the exporter passes
    # `certificate_file` on: with either set, the exporter would not trust the receiver.
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    with running_otlp_receiver(tls=True) as otlp:
        assert otlp.url.startswith("https://") and otlp.ca_file is not None
        exporter = OTLPSpanExporter(endpoint=otlp.endpoint("traces"), certificate_file=str(otlp.ca_file))
        provider = tracer_provider(exporter)
        with provider.get_tracer("anvil.tests").start_as_current_span("private"):
            pass
        provider.shutdown()
        assert otlp.wait_for(lambda r: r.spans("private") != [], timeout=5)


def test_otlp_metrics_counter_and_histogram(otlp: OtlpReceiver) -> None:
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=otlp.endpoint("metrics"), timeout=5), export_interval_millis=NEVER_MS
    )
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    meter = provider.get_meter("anvil.tests")
    calls = meter.create_counter("anvil.calls", unit="{call}", description="Tool calls")
    latency = meter.create_histogram("anvil.latency", unit="s", description="Latency")
    calls.add(2, {"tool": "ask"})
    calls.add(1, {"tool": "ask"})
    calls.add(5, {"tool": "search"})
    latency.record(0.25, {"tool": "ask"})
    latency.record(0.75, {"tool": "ask"})
    assert provider.force_flush(timeout_millis=5000)

    assert otlp.wait_for(lambda r: r.metrics("anvil.calls") and r.metrics("anvil.latency"), timeout=5)
    counter = otlp.metrics("anvil.calls")[0]
    assert (counter.kind, counter.unit, counter.description) == ("sum", "{call}", "Tool calls")
    assert counter.is_monotonic is True
    assert sorted((p.attributes["tool"], p.value) for p in counter.points) == [("ask", 3), ("search", 5)]
    assert counter.resource["service.name"] == "anvil-test"
    assert counter.scope == "anvil.tests"
    histogram = otlp.metrics("anvil.latency")[0]
    assert histogram.kind == "histogram" and histogram.unit == "s"
    [point] = histogram.points
    assert point.attributes == {"tool": "ask"}
    assert point.value == 2
    assert point.sum == pytest.approx(1.0)
    assert sum(point.bucket_counts) == 2 and len(point.bucket_counts) == len(point.explicit_bounds) + 1
    provider.shutdown()


def test_otlp_logs_correlate_with_the_active_span(otlp: OtlpReceiver) -> None:
    logger_provider = LoggerProvider(resource=RESOURCE)
    processor = BatchLogRecordProcessor(OTLPLogExporter(endpoint=otlp.endpoint("logs"), timeout=5))
    logger_provider.add_log_record_processor(processor)
    handler = LoggingHandler(level=logging.INFO, logger_provider=logger_provider)
    log = logging.getLogger("anvil.tests.receivers")
    log.propagate = False
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    tracer = TracerProvider(resource=RESOURCE).get_tracer("anvil.tests")
    try:
        with tracer.start_as_current_span("handling") as span:
            log.warning("answered %s passages", 3, extra={"anvil.user": "u-1"})
        assert logger_provider.force_flush(timeout_millis=5000)
    finally:
        log.removeHandler(handler)
        log.propagate = True
        logger_provider.shutdown()

    assert otlp.wait_for(lambda r: len(r.logs()) == 1, timeout=5)
    [record] = otlp.logs()
    assert record.body == "answered 3 passages"
    assert record.severity_text == "WARN" or record.severity_text == "WARNING"
    assert record.severity_number == 13  # SEVERITY_NUMBER_WARN
    assert record.attributes["anvil.user"] == "u-1"
    assert record.trace_id == format(span.get_span_context().trace_id, "032x")
    assert record.span_id == format(span.get_span_context().span_id, "016x")
    assert record.resource["service.name"] == "anvil-test"


def test_otlp_json_and_scripted_failures(otlp: OtlpReceiver) -> None:
    import httpx

    otlp.fail_next(503)
    with httpx.Client(timeout=5) as client:
        failed = client.post(
            otlp.endpoint("logs"), content=b"{}", headers={"content-type": "application/json"}
        )
        assert failed.status_code == 503
        body = {
            "resourceLogs": [
                {
                    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]},
                    "scopeLogs": [
                        {
                            "logRecords": [
                                {
                                    "body": {
                                        "kvlistValue": {"values": [{"key": "k", "value": {"intValue": "7"}}]}
                                    },
                                    "traceId": "5b8efff798038103d269b633813fc60c",
                                    "spanId": "eee19b7ec3c1b174",
                                }
                            ]
                        }
                    ],
                }
            ]
        }
        answered = client.post(otlp.endpoint("logs"), json=body)
        assert answered.status_code == 200
        assert answered.headers["content-type"].startswith("application/json")
        unsupported = client.post(otlp.endpoint("logs"), content=b"x", headers={"content-type": "text/plain"})
        assert unsupported.status_code == 415
    [record] = otlp.logs()
    assert record.body == {"k": 7}
    assert record.trace_id == "5b8efff798038103d269b633813fc60c"
    assert record.span_id == "eee19b7ec3c1b174"
    assert len(otlp.requests()) == 3


def test_wait_for_times_out_without_data(otlp: OtlpReceiver) -> None:
    started = time.monotonic()
    assert not otlp.wait_for(lambda r: r.spans() != [], timeout=0.2)
    assert time.monotonic() - started < 2


# --- Azure Monitor ----------------------------------------------------------------------------------------


def test_azure_trace_exporter_sends_request_and_dependency_envelopes(azure: AzureIngestion) -> None:
    provider = azure_tracer_provider(connection_string=azure.connection_string, disable_offline_storage=True)
    tracer = provider.get_tracer("anvil.tests")
    server_attributes = {
        "http.request.method": "POST",
        "url.path": "/mcp",
        "url.scheme": "http",
        "server.address": "127.0.0.1",
        "http.route": "/mcp",
        "http.response.status_code": 200,
    }
    with tracer.start_as_current_span("POST /mcp", kind=SpanKind.SERVER, attributes=server_attributes):
        client_attributes = {
            "http.request.method": "POST",
            "url.full": "https://models.example/v1/chat/completions",
            "server.address": "models.example",
            "server.port": 8443,
            "http.response.status_code": 200,
        }
        with tracer.start_as_current_span("POST", kind=SpanKind.CLIENT, attributes=client_attributes):
            pass
    provider.shutdown()

    assert azure.wait_for(lambda r: r.envelopes("Request") and r.envelopes("RemoteDependency"), timeout=5)
    [request] = azure.envelopes("Request")
    [dependency] = azure.envelopes("RemoteDependency")
    assert request["name"] == "Microsoft.ApplicationInsights.Request"
    assert request["iKey"] == azure.connection_string.split(";")[0].split("=")[1]
    assert request["data"]["baseType"] == "RequestData"
    assert request["data"]["baseData"]["responseCode"] == "200"
    assert request["data"]["baseData"]["url"].endswith("/mcp")
    assert dependency["data"]["baseType"] == "RemoteDependencyData"
    assert dependency["data"]["baseData"]["target"] == "models.example:8443"
    assert dependency["tags"]["ai.operation.id"] == request["tags"]["ai.operation.id"]
    assert dependency["tags"]["ai.operation.parentId"] == request["data"]["baseData"]["id"]
    assert request["tags"]["ai.cloud.role"] == "anvil-test"
    assert set(azure.paths()) == {"/v2.1/track"}
    assert all(h["content-type"] == "application/json" for h in azure.headers())
    assert all("authorization" not in h for h in azure.headers())


def test_azure_metric_and_log_exporters(azure: AzureIngestion) -> None:
    reader = PeriodicExportingMetricReader(
        AzureMonitorMetricExporter(connection_string=azure.connection_string, disable_offline_storage=True),
        export_interval_millis=NEVER_MS,
    )
    meter_provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    meter_provider.get_meter("anvil.tests").create_counter("anvil.calls").add(4, {"tool": "ask"})
    assert meter_provider.force_flush(timeout_millis=5000)
    meter_provider.shutdown()

    logger_provider = LoggerProvider(resource=RESOURCE)
    log_exporter = AzureMonitorLogExporter(
        connection_string=azure.connection_string, disable_offline_storage=True
    )
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    handler = LoggingHandler(level=logging.INFO, logger_provider=logger_provider)
    log = logging.getLogger("anvil.tests.azure")
    log.propagate = False
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        log.info("hello ingestion")
    finally:
        log.removeHandler(handler)
        log.propagate = True
        logger_provider.shutdown()

    assert azure.wait_for(lambda r: r.envelopes("Metric") and r.envelopes("Message"), timeout=5)
    metrics = [m for e in azure.envelopes("Metric") for m in e["data"]["baseData"]["metrics"]]
    assert {"name": "anvil.calls", "value": 4.0} in [
        {"name": m["name"], "value": m["value"]} for m in metrics
    ]
    [message] = azure.envelopes("Message")
    assert message["data"]["baseData"]["message"] == "hello ingestion"
    assert message["data"]["baseData"]["severityLevel"] == 1  # Information


class StaticCredential:
    """A token credential that hands out a fixed token and remembers the scopes asked for."""

    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **_kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken("local-bearer-token", int(time.time()) + 3600)


def test_azure_entra_credential_needs_https_and_sends_a_bearer_token(
    quiet_azure: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running_azure_ingestion(tls=True) as azure:
        assert azure.url.startswith("https://") and azure.ca_file is not None
        # What a child process would be given: the receiver's authority through the requests CA variable.
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(azure.ca_file))
        credential = StaticCredential()
        provider = azure_tracer_provider(
            connection_string=azure.connection_string, credential=credential, disable_offline_storage=True
        )
        with provider.get_tracer("anvil.tests").start_as_current_span("POST /mcp", kind=SpanKind.SERVER):
            pass
        provider.shutdown()

        assert azure.wait_for(lambda r: r.envelopes("Request") != [], timeout=5)
        assert azure.headers()[0]["authorization"] == "Bearer local-bearer-token"
        assert credential.scopes == [("https://monitor.azure.com//.default",)]


def test_azure_bearer_token_is_refused_over_plain_http(azure: AzureIngestion) -> None:
    credential = StaticCredential()
    provider = azure_tracer_provider(
        connection_string=azure.connection_string, credential=credential, disable_offline_storage=True
    )
    with provider.get_tracer("anvil.tests").start_as_current_span("dropped", kind=SpanKind.SERVER):
        pass
    provider.shutdown()
    # The SDK raises before sending anything (nor asking for a token): nothing reaches the receiver.
    assert azure.requests() == []
    assert credential.scopes == []


def test_azure_transport_retries_a_failed_request_at_once(azure: AzureIngestion) -> None:
    azure.fail_next(503)
    provider = azure_tracer_provider(connection_string=azure.connection_string, disable_offline_storage=True)
    with provider.get_tracer("anvil.tests").start_as_current_span("retried", kind=SpanKind.SERVER):
        pass
    provider.shutdown()
    # azure-core's retry policy sent the same batch again; the second answer accepted it.
    assert [path for path, _ in azure.raw_bodies()] == ["/v2.1/track", "/v2.1/track"]
    assert azure.raw_bodies()[0][1] == azure.raw_bodies()[1][1]
    assert [e["data"]["baseData"]["name"] for e in azure.envelopes("Request")] == ["retried"]


def test_azure_failed_export_goes_to_offline_storage_when_enabled(quiet_azure: Path) -> None:
    with running_azure_ingestion() as azure:
        azure.fail_next(503)
        # No transport retries, so the one failure is final for this export.
        provider = azure_tracer_provider(
            connection_string=azure.connection_string, storage_directory=str(quiet_azure), retry_total=0
        )
        with provider.get_tracer("anvil.tests").start_as_current_span("kept", kind=SpanKind.SERVER):
            pass
        provider.shutdown()
        assert len(azure.requests()) == 1
        assert azure.envelopes() == []
    # The batch is kept on disk (leased for the minimum retry interval) for a later export to resend.
    [blob] = [p for p in quiet_azure.rglob("*") if p.is_file()]
    assert ".blob" in blob.name
    assert b'"kept"' in blob.read_bytes()


def test_azure_other_calls_are_recorded_and_bodies_decompressed(azure: AzureIngestion) -> None:
    import gzip

    import httpx

    envelope = {"name": "Microsoft.ApplicationInsights.Event", "data": {"baseData": {"name": "e"}}}
    with httpx.Client(base_url=azure.url, timeout=5) as client:
        zipped = gzip.compress(json.dumps([envelope]).encode())
        # The exporter joins "IngestionEndpoint=<url>/" and "/v2.1/track" into "//v2.1/track".
        track = client.post(f"{azure.url}//v2.1/track", content=zipped, headers={"content-encoding": "gzip"})
        assert track.json() == {"itemsReceived": 1, "itemsAccepted": 1, "errors": []}
        ping = client.post("/QuickPulseService.svc/ping", params={"ikey": "k"}, json={})
        assert ping.status_code == 200 and ping.headers["x-ms-qps-subscribed"] == "false"
        assert client.get("/api/profiles/k/appId").status_code == 404
        assert client.post("/v2.1/track", content=b"not json").status_code == 400
    assert azure.envelopes("Event") == [envelope]
    assert azure.paths() == [
        "/v2.1/track",
        "/QuickPulseService.svc/ping",
        "/api/profiles/k/appId",
        "/v2.1/track",
    ]
    assert azure.raw_bodies()[0][1] == json.dumps([envelope]).encode()
