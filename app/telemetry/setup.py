"""OpenTelemetry traces, metrics and logs, to any OTLP backend and to Application Insights.

Off unless configured, and then nothing of the OpenTelemetry SDK is imported. It switches on
from the standard variables:

- OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` (every signal) or a per-signal
  `OTEL_EXPORTER_OTLP_{TRACES,METRICS,LOGS}_ENDPOINT` is set, over HTTP/protobuf. The exporters,
  sampler, resource, batch processor and metric interval read their own `OTEL_*` variables
  (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_BSP_*`,
  `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_EXPORTER_OTLP_HEADERS`, ...).
- Azure Monitor when `APPLICATIONINSIGHTS_CONNECTION_STRING` is set, signing in with the managed
  identity (`AZURE_CLIENT_ID` for a user-assigned one) when `ANVIL_TELEMETRY_AAD_AUTH` is on.

What Anvil records never holds a token, a question, an answer or instructions unless
`ANVIL_TELEMETRY_CAPTURE_CONTENT` is on; the caller and conversation ids appear only as keyed
hashes (`Telemetry.pseudonym`). `TracedStore` and `TracedEngine` wrap the ports with spans and
metrics, so nothing of this runs (or costs) when telemetry is off.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import app
from app.domain.conversation import Conversation, ConversationPage
from app.domain.ports import (
    Answer,
    AnswerEngine,
    ConversationStore,
    Document,
    Passage,
    PastExchange,
    Progress,
    Stored,
    VersionConflict,
)
from app.errors import AnvilError
from app.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, Meter
    from opentelemetry.trace import Tracer

logger = logging.getLogger(__name__)

OTLP_ENDPOINTS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
)
AZURE_CONNECTION_STRING = "APPLICATIONINSIGHTS_CONNECTION_STRING"
#: The Entra scope Application Insights ingestion accepts tokens for.
AZURE_MONITOR_SCOPE = "https://monitor.azure.com//.default"
SCOPE_NAME = "anvil"
#: Histogram bounds for durations in seconds (OpenTelemetry's advice for HTTP server durations).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether any exporter is configured in `environ`."""
    return any(environ.get(name) for name in (*OTLP_ENDPOINTS, AZURE_CONNECTION_STRING))


class TelemetryError(RuntimeError):
    """Telemetry is configured in a way Anvil cannot honour; the message says what to change."""


@dataclass
class Instruments:
    """The metrics Anvil records, named and united per OpenTelemetry's conventions."""

    requests: Histogram
    asks: Counter
    turns: Counter
    conflicts: Counter
    condensed: Counter
    store_duration: Histogram
    store_charge: Histogram
    engine_duration: Histogram
    engine_tokens: Histogram
    sign_in_failures: Counter

    @classmethod
    def on(cls, meter: Meter) -> Instruments:
        def seconds(name: str, description: str) -> Histogram:
            return meter.create_histogram(
                name, unit="s", description=description, explicit_bucket_boundaries_advisory=DURATION_BUCKETS
            )

        return cls(
            requests=seconds("http.server.request.duration", "Duration of HTTP server requests."),
            asks=meter.create_counter(
                "anvil.asks", unit="{ask}", description="Asks answered or refused, by outcome."
            ),
            turns=meter.create_counter("anvil.turns", unit="{turn}", description="Turns written to a store."),
            conflicts=meter.create_counter(
                "anvil.conversation.conflicts",
                unit="{conflict}",
                description="Conditional writes that lost to another writer and were retried.",
            ),
            condensed=meter.create_counter(
                "anvil.conversation.condensed",
                unit="{ask}",
                description="Asks whose conversation had older turns dropped or left out of context.",
            ),
            store_duration=seconds(
                "db.client.operation.duration", "Duration of conversation store operations."
            ),
            store_charge=meter.create_histogram(
                "azure.cosmosdb.client.operation.request_charge",
                unit="{request_unit}",
                description="Request units Cosmos DB charged for a store operation.",
            ),
            engine_duration=seconds("gen_ai.client.operation.duration", "Duration of answer engine calls."),
            engine_tokens=meter.create_histogram(
                "gen_ai.client.token.usage", unit="{token}", description="Tokens a language model used."
            ),
            sign_in_failures=meter.create_counter(
                "anvil.sign_in.failures",
                unit="{request}",
                description="Requests refused at sign-in, by reason.",
            ),
        )


class Telemetry:
    """The tracer, the instruments and the privacy rules of one running Anvil."""

    def __init__(
        self,
        tracer: Tracer,
        meter: Meter,
        *,
        pseudonym_key: bytes,
        capture_content: bool = False,
        shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.tracer = tracer
        self.instruments = Instruments.on(meter)
        self.capture_content = capture_content
        self._key = pseudonym_key
        self._shutdown = shutdown

    def pseudonym(self, value: str) -> str:
        """A stable keyed hash of `value` (a user's oid, a conversation id): never the value."""
        return hmac.new(self._key, value.encode(), hashlib.sha256).hexdigest()[:16]

    def shutdown(self) -> None:
        """Flush every exporter and stop the providers (spans and metrics still buffered are sent)."""
        if self._shutdown is not None:
            shutdown, self._shutdown = self._shutdown, None
            shutdown()


def start(settings: Settings, environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """Configure the OpenTelemetry SDK from `environ` (the process environment by default), set
    the global tracer and meter providers, and attach a log handler; None when nothing is
    configured. Raises `TelemetryError` for a configuration Anvil does not support."""
    env = os.environ if environ is None else environ
    if not wanted(env):
        return None
    from opentelemetry import metrics, trace
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    defaults: dict[str, Any] = {SERVICE_VERSION: app.__version__}
    if not env.get("OTEL_SERVICE_NAME"):
        defaults[SERVICE_NAME] = "anvil"
    # `Resource.create` adds OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME on top.
    resource = Resource.create(defaults)
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = []
    logger_provider = LoggerProvider(resource=resource)

    if any(env.get(name) for name in OTLP_ENDPOINTS):
        protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        for signal in ("TRACES", "METRICS", "LOGS"):
            protocol = env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL", protocol)
            if protocol != "http/protobuf":
                raise TelemetryError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r} is not supported: Anvil exports OTLP over "
                    "HTTP (http/protobuf); point the endpoint at the collector's HTTP port (4318)"
                )
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        generic = bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
        if generic or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        if generic or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        if generic or env.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"):
            logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))

    connection_string = env.get(AZURE_CONNECTION_STRING)
    if connection_string:
        from azure.monitor.opentelemetry.exporter import (
            AzureMonitorLogExporter,
            AzureMonitorMetricExporter,
            AzureMonitorTraceExporter,
        )

        from app.private_files import private_folder

        # Batches that could not be sent wait in the data folder and are sent again later. The
        # exporter makes its own folder 0700 but creates the folders above it as the umask says.
        storage = settings.data_dir / "telemetry"
        with contextlib.suppress(OSError):  # the exporter then reports that it cannot store batches
            private_folder(storage)
        options: dict[str, Any] = {
            "connection_string": connection_string,
            "storage_directory": str(storage),
        }
        if settings.telemetry_aad_auth:
            from azure.identity import ManagedIdentityCredential

            client_id = env.get("AZURE_CLIENT_ID")
            options["credential"] = (
                ManagedIdentityCredential(client_id=client_id) if client_id else ManagedIdentityCredential()
            )
        tracer_provider.add_span_processor(
            BatchSpanProcessor(AzureMonitorTraceExporter(tracer_provider=tracer_provider, **options))
        )
        readers.append(PeriodicExportingMetricReader(AzureMonitorMetricExporter(**options)))
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(AzureMonitorLogExporter(**options)))

    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    # The Azure SDKs (Cosmos DB, Entra sign-in for the model and the store) trace their own
    # operations and HTTP requests through the global provider once told to.
    from azure.core.settings import settings as azure_settings

    azure_settings.tracing_enabled = True
    metrics.set_meter_provider(meter_provider)
    handler = LoggingHandler(level=logging.NOTSET, logger_provider=logger_provider)
    from app.telemetry.logs import install_redactor

    install_redactor(handler)
    # An access log line says what the request's server span says; it is not exported twice.
    handler.addFilter(lambda record: not record.name.startswith("anvil.access"))
    logging.getLogger().addHandler(handler)

    def shutdown() -> None:
        logging.getLogger().removeHandler(handler)
        tracer_provider.shutdown()
        meter_provider.shutdown()
        logger_provider.shutdown()

    return Telemetry(
        tracer_provider.get_tracer(SCOPE_NAME, app.__version__),
        meter_provider.get_meter(SCOPE_NAME, app.__version__),
        pseudonym_key=_pseudonym_key(settings),
        capture_content=settings.telemetry_capture_content,
        shutdown=shutdown,
    )


def _pseudonym_key(settings: Settings) -> bytes:
    if settings.telemetry_pseudonym_key is not None:
        return settings.telemetry_pseudonym_key.get_secret_value().encode()
    # Without a shared key, ids are comparable within this process only.
    return secrets.token_bytes(32)


# --- spans and metrics around the ports ------------------------------------------------------------

#: Request charges of the store operation under way in this task (Cosmos DB only).
_CHARGES: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("anvil_charges", default=None)


class TracedStore:
    """A `ConversationStore` whose every operation is a client span and a duration, with turns
    written and conflicts counted. Conversation and user ids appear only as pseudonyms."""

    def __init__(self, inner: ConversationStore, telemetry: Telemetry, kind: str) -> None:
        self.inner = inner
        self.telemetry = telemetry
        self.kind = kind
        self._system = {"sqlite": "sqlite", "cosmos": "azure.cosmosdb"}.get(kind, "other_sql")
        observe = getattr(inner, "observe_request_charges", None)
        if observe is not None:
            observe(self._charged)

    def _charged(self, request_units: float) -> None:
        """A Cosmos DB response's request charge, added to the operation under way."""
        charges = _CHARGES.get()
        if charges is not None:
            charges.append(request_units)

    async def _traced(self, operation: str, call: Callable[[], Any], **attributes: Any) -> Any:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        telemetry = self.telemetry
        labels = {"db.system.name": self._system, "db.operation.name": operation}
        started = time.perf_counter()
        charges: list[float] = []
        collecting = _CHARGES.set(charges)
        with telemetry.tracer.start_as_current_span(
            f"{operation} conversations", kind=SpanKind.CLIENT, attributes={**labels, **attributes}
        ) as span:
            try:
                result = await call()
            except VersionConflict:
                telemetry.instruments.conflicts.add(1, {"db.operation.name": operation})
                span.set_attribute("anvil.conflict", True)
                raise
            except AnvilError as error:
                span.set_status(Status(StatusCode.ERROR, error.kind))
                span.set_attribute("error.type", error.kind)
                labels = {**labels, "error.type": error.kind}
                raise
            finally:
                _CHARGES.reset(collecting)
                telemetry.instruments.store_duration.record(time.perf_counter() - started, labels)
                if charges:
                    span.set_attribute("azure.cosmosdb.operation.request_charge", sum(charges))
                    telemetry.instruments.store_charge.record(sum(charges), labels)
        return result

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        found: Stored | None = await self._traced(
            "get", lambda: self.inner.get(oid, conversation_id), **self._ids(oid, conversation_id)
        )
        return found

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        etag: str = await self._traced(
            "create",
            lambda: self.inner.create(conversation, max_conversations=max_conversations),
            **self._ids(conversation.oid, conversation.conversation_id),
        )
        self._written()
        return etag

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        etag: str = await self._traced(
            "replace",
            lambda: self.inner.replace(conversation, if_match=if_match),
            **self._ids(conversation.oid, conversation.conversation_id),
        )
        self._written()
        return etag

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        deleted: bool = await self._traced(
            "delete",
            lambda: self.inner.delete(oid, conversation_id, if_match=if_match),
            **self._ids(oid, conversation_id),
        )
        return deleted

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        page: ConversationPage = await self._traced(
            "list", lambda: self.inner.list(oid, tid, limit=limit, cursor=cursor), **self._ids(oid)
        )
        return page

    async def count(self, oid: str, tid: str) -> int:
        counted: int = await self._traced("count", lambda: self.inner.count(oid, tid), **self._ids(oid))
        return counted

    async def delete_all(self, oid: str, tid: str) -> int:
        deleted: int = await self._traced(
            "delete_all", lambda: self.inner.delete_all(oid, tid), **self._ids(oid)
        )
        return deleted

    async def check(self) -> None:
        await self.inner.check()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _ids(self, oid: str, conversation_id: str | None = None) -> dict[str, str]:
        ids = {"anvil.user": self.telemetry.pseudonym(oid)}
        if conversation_id is not None:
            ids["anvil.conversation"] = self.telemetry.pseudonym(f"{oid}:{conversation_id}")
        return ids

    def _written(self) -> None:
        self.telemetry.instruments.turns.add(1, {"db.system.name": self._system})


class TracedEngine:
    """An `AnswerEngine` whose answers are spans (GenAI conventions for model engines) with their
    duration and token usage recorded."""

    def __init__(self, inner: AnswerEngine, telemetry: Telemetry, model: str | None = None) -> None:
        self.inner = inner
        self.telemetry = telemetry
        self.name = inner.name
        self.model = model

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        telemetry = self.telemetry
        provider = {"openai": "openai", "azure-openai": "azure.ai.openai"}.get(
            self.name, f"anvil.{self.name}"
        )
        labels: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider}
        if self.model:
            labels["gen_ai.request.model"] = self.model
        attributes: dict[str, Any] = {**labels, "anvil.history.turns": len(history)}
        if telemetry.capture_content:
            attributes["gen_ai.input.messages"] = question
        started = time.perf_counter()
        name = f"chat {self.model}" if self.model else f"answer {self.name}"
        with telemetry.tracer.start_as_current_span(
            name, kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            try:
                answer = await self.inner.answer(question, history, instructions, progress=progress)
            except AnvilError as error:
                span.set_status(Status(StatusCode.ERROR, error.kind))
                span.set_attribute("error.type", error.kind)
                labels["error.type"] = error.kind
                raise
            finally:
                telemetry.instruments.engine_duration.record(time.perf_counter() - started, labels)
            span.set_attribute("anvil.sources", len(answer.sources))
            if answer.usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", answer.usage.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", answer.usage.output_tokens)
                tokens = telemetry.instruments.engine_tokens
                tokens.record(answer.usage.input_tokens, {**labels, "gen_ai.token.type": "input"})
                tokens.record(answer.usage.output_tokens, {**labels, "gen_ai.token.type": "output"})
            if telemetry.capture_content:
                span.set_attribute("gen_ai.output.messages", answer.text)
        return answer

    async def search(self, text: str, max_results: int) -> list[Passage]:
        return await self.inner.search(text, max_results)

    async def fetch(self, source: str, max_chars: int) -> Document | None:
        return await self.inner.fetch(source, max_chars)
