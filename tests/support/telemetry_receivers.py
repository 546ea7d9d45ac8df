"""Local receivers for what a process exports: OTLP/HTTP, and Azure Monitor (Application Insights) ingestion.

Each is a real uvicorn server on a free loopback port, in a thread of the test process, that records
every request and answers the way the real service does, so a real exporter (in process, or in an
`anvil serve` child process pointed at `url` / `connection_string`) sends to it unchanged.

- `running_otlp_receiver()` takes `POST /v1/traces`, `/v1/metrics` and `/v1/logs` (protobuf, or
  OTLP JSON; gzip or deflate when the exporter compresses), decodes them with the `opentelemetry-proto`
  classes and keeps spans, metric points and log records as plain Python values.
- `running_azure_ingestion()` takes the Application Insights ingestion API, `POST /v2.1/track` (a JSON
  array of envelopes), answers `{"itemsReceived": n, "itemsAccepted": n, "errors": []}`, and records
  the live-metrics (QuickPulse) calls too. With `tls=True` it serves HTTPS with a certificate of
  the test run's throwaway authority (`ca_file`, from `support.tls`), which Entra ID (AAD) sign-in
  needs: the Azure SDK refuses to send a bearer token over plain HTTP.

Tests wait with `wait_for(predicate, timeout)`, woken on every request; `raw_bodies()` returns every
byte received, decompressed, so a test can search all of it for text that must never leave.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from support.anvil_server import free_port
from support.threaded_server import serving_in_thread
from support.tls import tls_files

#: The instrumentation key in `AzureIngestion.connection_string` (any GUID does; this one is fixed).
INSTRUMENTATION_KEY = "00000000-0000-4000-8000-0000000a4e71"

#: Environment that keeps the Azure Monitor exporter from calling Microsoft's own endpoints on the side:
#: its SDK self-telemetry ("statsbeat", to a fixed Microsoft ingestion endpoint), the per-customer SDK
#: statistics (periodic extra metric envelopes), and the remote configuration ("OneSettings") poller.
AZURE_EXPORTER_QUIET_ENV: dict[str, str] = {
    "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
    "APPLICATIONINSIGHTS_SDKSTATS_DISABLED": "true",
    "APPLICATIONINSIGHTS_CONTROLPLANE_DISABLED": "true",
}


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as received: its body decompressed, header names in lower case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class ReceivedSpan:
    """One OTLP span, ids as lower-case hex (`parent_span_id` is "" for a root span)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    events: list[tuple[str, dict[str, Any]]]
    resource: dict[str, Any]
    scope: str
    status_message: str = ""
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0


@dataclass(frozen=True)
class ReceivedPoint:
    """One metric data point: the number for a sum or gauge, the count for a histogram (and its sum)."""

    attributes: dict[str, Any]
    value: int | float
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()


@dataclass(frozen=True)
class ReceivedMetric:
    """One OTLP metric with its points; `kind` is the data field's name ("sum", "gauge", "histogram", ...)."""

    name: str
    unit: str
    description: str
    kind: str
    points: list[ReceivedPoint]
    resource: dict[str, Any]
    scope: str = ""
    is_monotonic: bool | None = None


@dataclass(frozen=True)
class ReceivedLog:
    """One OTLP log record; `trace_id` and `span_id` are "" when it was not emitted inside a span."""

    body: Any
    severity_text: str
    severity_number: int
    attributes: dict[str, Any]
    trace_id: str
    span_id: str
    resource: dict[str, Any]
    scope: str = ""
    event_name: str = ""


def any_value(value: AnyValue) -> Any:
    """An OTLP `AnyValue` as a Python value (None when unset)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, which)


def attributes(pairs: Any) -> dict[str, Any]:
    """Repeated OTLP `KeyValue`s as a dict."""
    result: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        result[pair.key] = any_value(pair.value)
    return result


def _decompress(body: bytes, encoding: str) -> bytes:
    """The body without its `Content-Encoding`; ValueError when it cannot be undone."""
    encoding = encoding.strip().lower()
    try:
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, EOFError, zlib.error) as error:
        raise ValueError(f"cannot decompress a {encoding} body: {error}") from error
    if encoding in ("", "identity"):
        return body
    raise ValueError(f"unsupported content encoding {encoding!r}")


class _Recorder:
    """Requests recorded under one lock; a condition notified on each one wakes `wait_for`."""

    def __init__(self, tls: bool = False) -> None:
        self.port = free_port()
        self.tls = tls
        #: The certificate authority a client must trust when `tls` is on (set when the server starts).
        self.ca_file: Path | None = None
        self._condition = threading.Condition(threading.RLock())
        self._requests: list[ReceivedRequest] = []
        self._failures: list[int] = []

    @property
    def url(self) -> str:
        """The base URL, without a trailing slash."""
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def requests(self) -> list[ReceivedRequest]:
        """Every request received, oldest first."""
        with self._condition:
            return list(self._requests)

    def raw_bodies(self) -> list[tuple[str, bytes]]:
        """(path, decompressed body) of every request received, oldest first."""
        with self._condition:
            return [(r.path, r.body) for r in self._requests]

    def headers(self) -> list[dict[str, str]]:
        """The headers of every request received (names in lower case), oldest first."""
        with self._condition:
            return [dict(r.headers) for r in self._requests]

    def fail_next(self, status: int, times: int = 1) -> None:
        """Answer the next `times` export requests with HTTP `status` (recorded, but their data dropped)."""
        with self._condition:
            self._failures.extend([status] * times)

    def wait_for(self, predicate: Callable[[Self], object], timeout: float = 10.0) -> bool:
        """Block until `predicate(self)` holds, re-checked on every request; False after `timeout` seconds."""
        with self._condition:
            return bool(self._condition.wait_for(lambda: predicate(self), timeout=timeout))

    def _record(self, request: ReceivedRequest) -> int | None:
        """Record a request; the scripted failure status to answer with, if any."""
        with self._condition:
            self._requests.append(request)
            self._condition.notify_all()
            return self._failures.pop(0) if self._failures else None

    def _store(self, update: Callable[[], None]) -> None:
        """Apply `update` to the decoded data under the lock, and wake the waiters."""
        with self._condition:
            update()
            self._condition.notify_all()

    @staticmethod
    async def _read(request: Request) -> ReceivedRequest:
        """The request with its body decompressed (ValueError when that fails)."""
        raw = await request.body()
        return ReceivedRequest(
            method=request.method,
            path=request.url.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=_decompress(raw, request.headers.get("content-encoding", "")),
        )

    def app(self) -> Starlette:
        """The Starlette application (each receiver defines its routes)."""
        raise NotImplementedError

    def asgi(self) -> Any:
        """`app()` behind a path fix: repeated slashes collapse ("//v2.1/track" is what a base URL ending
        in "/" gives, and the real services accept it)."""
        app = self.app()

        async def collapse_slashes(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and "//" in scope["path"]:
                scope = dict(scope, path=re.sub("/{2,}", "/", scope["path"]))
            await app(scope, receive, send)

        return collapse_slashes


_OTLP_SIGNALS: dict[str, tuple[type[Message], type[Message]]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
    "/v1/logs": (ExportLogsServiceRequest, ExportLogsServiceResponse),
}


class OtlpReceiver(_Recorder):
    """An OTLP/HTTP collector endpoint that keeps what it decodes; point exporters at `url`."""

    def __init__(self, tls: bool = False) -> None:
        super().__init__(tls)
        self._spans: list[ReceivedSpan] = []
        self._metrics: list[ReceivedMetric] = []
        self._logs: list[ReceivedLog] = []

    def endpoint(self, signal: str) -> str:
        """The full URL of one signal: "traces", "metrics" or "logs"."""
        return f"{self.url}/v1/{signal}"

    def spans(self, name: str | None = None) -> list[ReceivedSpan]:
        """Spans received (only those called `name`, when given), in arrival order."""
        with self._condition:
            return [s for s in self._spans if name is None or s.name == name]

    def metrics(self, name: str | None = None) -> list[ReceivedMetric]:
        """Metrics received (one entry per metric per export; only `name`, when given), in arrival order."""
        with self._condition:
            return [m for m in self._metrics if name is None or m.name == name]

    def logs(self) -> list[ReceivedLog]:
        """Log records received, in arrival order."""
        with self._condition:
            return list(self._logs)

    async def _export(self, request: Request) -> Response:
        try:
            received = await self._read(request)
        except ValueError as error:
            return Response(str(error), status_code=400)
        failure = self._record(received)
        if failure is not None:
            return Response(status_code=failure)
        request_type, response_type = _OTLP_SIGNALS[received.path]
        content_type = received.headers.get("content-type", "").split(";")[0].strip().lower()
        message = request_type()
        try:
            if content_type == "application/x-protobuf":
                message.ParseFromString(received.body)
            elif content_type == "application/json":
                document = _hex_ids_as_base64(json.loads(received.body))
                json_format.ParseDict(document, message, ignore_unknown_fields=True)
            else:
                return Response(f"unsupported content type {content_type!r}", status_code=415)
        except (DecodeError, json_format.ParseError, ValueError) as error:
            return Response(f"cannot decode: {error}", status_code=400)
        self._store(lambda: self._keep(message))
        answer = response_type()
        if content_type == "application/json":
            return Response(json_format.MessageToJson(answer), media_type="application/json")
        return Response(answer.SerializeToString(), media_type="application/x-protobuf")

    def _keep(self, message: Message) -> None:
        if isinstance(message, ExportTraceServiceRequest):
            self._spans.extend(_spans(message))
        elif isinstance(message, ExportMetricsServiceRequest):
            self._metrics.extend(_metrics(message))
        elif isinstance(message, ExportLogsServiceRequest):
            self._logs.extend(_logs(message))

    def app(self) -> Starlette:
        """The Starlette application."""
        return Starlette(routes=[Route(path, self._export, methods=["POST"]) for path in _OTLP_SIGNALS])


_OTLP_JSON_IDS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hex_ids_as_base64(document: Any) -> Any:
    """OTLP JSON writes trace and span ids in hex, where protobuf's JSON mapping expects base64 bytes."""
    if isinstance(document, list):
        return [_hex_ids_as_base64(item) for item in document]
    if isinstance(document, dict):
        return {
            key: base64.b64encode(bytes.fromhex(value)).decode()
            if key in _OTLP_JSON_IDS and isinstance(value, str)
            else _hex_ids_as_base64(value)
            for key, value in document.items()
        }
    return document


def _spans(message: ExportTraceServiceRequest) -> Iterator[ReceivedSpan]:
    for resource_spans in message.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    kind=span.kind,
                    attributes=attributes(span.attributes),
                    status_code=span.status.code,
                    events=[(event.name, attributes(event.attributes)) for event in span.events],
                    resource=resource,
                    scope=scope_spans.scope.name,
                    status_message=span.status.message,
                    start_time_unix_nano=span.start_time_unix_nano,
                    end_time_unix_nano=span.end_time_unix_nano,
                )


def _metrics(message: ExportMetricsServiceRequest) -> Iterator[ReceivedMetric]:
    for resource_metrics in message.resource_metrics:
        resource = attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data") or ""
                points: list[ReceivedPoint] = []
                monotonic: bool | None = None
                if kind in ("sum", "gauge"):
                    data = getattr(metric, kind)
                    monotonic = data.is_monotonic if kind == "sum" else None
                    for point in data.data_points:
                        number = getattr(point, point.WhichOneof("value") or "as_int")
                        points.append(ReceivedPoint(attributes(point.attributes), number))
                elif kind in ("histogram", "exponential_histogram"):
                    for point in getattr(metric, kind).data_points:
                        bounds = tuple(point.explicit_bounds) if kind == "histogram" else ()
                        buckets = tuple(point.bucket_counts) if kind == "histogram" else ()
                        total = point.sum if point.HasField("sum") else None
                        points.append(
                            ReceivedPoint(attributes(point.attributes), point.count, total, buckets, bounds)
                        )
                elif kind == "summary":
                    for point in metric.summary.data_points:
                        points.append(ReceivedPoint(attributes(point.attributes), point.count, point.sum))
                yield ReceivedMetric(
                    name=metric.name,
                    unit=metric.unit,
                    description=metric.description,
                    kind=kind,
                    points=points,
                    resource=resource,
                    scope=scope_metrics.scope.name,
                    is_monotonic=monotonic,
                )


def _logs(message: ExportLogsServiceRequest) -> Iterator[ReceivedLog]:
    for resource_logs in message.resource_logs:
        resource = attributes(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                yield ReceivedLog(
                    body=any_value(record.body),
                    severity_text=record.severity_text,
                    severity_number=record.severity_number,
                    attributes=attributes(record.attributes),
                    trace_id=record.trace_id.hex(),
                    span_id=record.span_id.hex(),
                    resource=resource,
                    scope=scope_logs.scope.name,
                    event_name=record.event_name,
                )


class AzureIngestion(_Recorder):
    """The Application Insights ingestion API; give exporters `connection_string`."""

    def __init__(self, tls: bool = False) -> None:
        super().__init__(tls)
        self._envelopes: list[dict[str, Any]] = []

    @property
    def connection_string(self) -> str:
        """A connection string whose ingestion and live-metrics endpoints are this server."""
        return (
            f"InstrumentationKey={INSTRUMENTATION_KEY};IngestionEndpoint={self.url}/;LiveEndpoint={self.url}/"
        )

    def envelopes(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Telemetry envelopes received, in arrival order.

        `kind` keeps those whose `name` is it or ends with "." + it, e.g. "Request", "RemoteDependency",
        "Message", "Exception", "Event" or "Metric".
        """
        with self._condition:
            return [
                e
                for e in self._envelopes
                if kind is None or e.get("name") == kind or str(e.get("name", "")).endswith("." + kind)
            ]

    def paths(self) -> list[str]:
        """The path of every request received, oldest first."""
        with self._condition:
            return [r.path for r in self._requests]

    async def _track(self, request: Request) -> Response:
        try:
            received = await self._read(request)
        except ValueError as error:
            return _breeze_error(400, str(error))
        failure = self._record(received)
        if failure is not None:
            return _breeze_error(failure, "scripted failure")
        try:
            items = _envelope_list(received.body)
        except ValueError as error:
            return _breeze_error(400, f"invalid JSON: {error}")
        self._store(lambda: self._envelopes.extend(items))
        return JSONResponse({"itemsReceived": len(items), "itemsAccepted": len(items), "errors": []})

    async def _live_metrics(self, request: Request) -> Response:
        """QuickPulse ping/post: recorded, answered "not subscribed" so the client keeps only pinging."""
        try:
            self._record(await self._read(request))
        except ValueError as error:
            return Response(str(error), status_code=400)
        return Response(status_code=200, headers={"x-ms-qps-subscribed": "false"})

    async def _other(self, request: Request) -> Response:
        """Any other call is recorded and answered 404."""
        try:
            self._record(await self._read(request))
        except ValueError as error:
            return Response(str(error), status_code=400)
        return JSONResponse({"error": "not found"}, status_code=404)

    def app(self) -> Starlette:
        """The Starlette application."""
        methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
        return Starlette(
            routes=[
                Route("/v2.1/track", self._track, methods=["POST"]),
                Route("/v2/track", self._track, methods=["POST"]),
                Route("/QuickPulseService.svc/{operation}", self._live_metrics, methods=["POST"]),
                Route("/{rest:path}", self._other, methods=methods),
            ]
        )


def _envelope_list(body: bytes) -> list[dict[str, Any]]:
    """A JSON array of envelopes, or newline-delimited envelopes (both are accepted by the service)."""
    text = body.decode("utf-8")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list) or not all(isinstance(item, dict) for item in parsed):
        raise ValueError("expected envelopes (JSON objects)")
    return parsed


def _breeze_error(status: int, message: str) -> JSONResponse:
    body = {
        "itemsReceived": 0,
        "itemsAccepted": 0,
        "errors": [{"index": 0, "statusCode": status, "message": message}],
    }
    return JSONResponse(body, status_code=status)


R = TypeVar("R", bound="_Recorder")


@contextmanager
def _serving(recorder: R) -> Iterator[R]:
    """Serve `recorder.app()` until exit, then stop the server and join its thread."""
    tls: dict[str, Any] = {}
    if recorder.tls:
        files = tls_files()
        recorder.ca_file = files.ca_file
        tls = {"ssl_certfile": str(files.cert_file), "ssl_keyfile": str(files.key_file)}
    # An idle keep-alive TLS client (the exporters keep one) never answers the server's close_notify,
    # so a graceful stop would wait out asyncio's 30 s TLS shutdown timeout: stop at once instead.
    what = f"the local {type(recorder).__name__}"
    with serving_in_thread(recorder.asgi(), recorder.port, what, stop_at_once=recorder.tls, **tls):
        yield recorder


@contextmanager
def running_otlp_receiver(tls: bool = False) -> Iterator[OtlpReceiver]:
    """A started OTLP/HTTP receiver (HTTPS with `ca_file` when `tls`); stopped, its thread joined, on exit."""
    with _serving(OtlpReceiver(tls)) as receiver:
        yield receiver


@contextmanager
def running_azure_ingestion(tls: bool = False) -> Iterator[AzureIngestion]:
    """A started Azure Monitor ingestion endpoint (HTTPS with `ca_file` when `tls`); stopped on exit."""
    with _serving(AzureIngestion(tls)) as receiver:
        yield receiver
