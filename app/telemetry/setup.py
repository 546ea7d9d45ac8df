"""Telemetry from the environment: the OpenTelemetry SDK's providers and exporters, to any OTLP
backend and to Application Insights.

Nothing of the SDK is imported unless an exporter is configured; without one, `start` returns
`Telemetry.off()`, whose tracer and meter are the API's no-op ones. It switches on from the
standard variables:

- OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` (every signal) or a per-signal
  `OTEL_EXPORTER_OTLP_{TRACES,METRICS,LOGS}_ENDPOINT` is set, over HTTP/protobuf. The exporters,
  sampler, resource, batch processor and metric interval read their own `OTEL_*` variables
  (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER[_ARG]`, `OTEL_BSP_*`,
  `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_EXPORTER_OTLP_HEADERS`, ...).
- Azure Monitor when `APPLICATIONINSIGHTS_CONNECTION_STRING` is set, signing in with the managed
  identity (`AZURE_CLIENT_ID` for a user-assigned one) when `ANVIL_TELEMETRY_AAD_AUTH` is on.

What Anvil records never holds a token, a question, an answer or instructions unless
`ANVIL_TELEMETRY_CAPTURE_CONTENT` is on; the caller and conversation ids appear only as keyed
hashes (`Telemetry.pseudonym`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

import app
from app.settings.telemetry import TelemetrySettings
from app.telemetry.instruments import SCOPE_NAME, Telemetry
from app.telemetry.redaction import install_redactor

logger = logging.getLogger(__name__)

OTLP_ENDPOINTS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
)
AZURE_CONNECTION_STRING = "APPLICATIONINSIGHTS_CONNECTION_STRING"


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether any exporter is configured in `environ`."""
    return any(environ.get(name) for name in (*OTLP_ENDPOINTS, AZURE_CONNECTION_STRING))


class TelemetryError(RuntimeError):
    """Telemetry is configured in a way Anvil cannot honour; the message says what to change."""


def start(settings: TelemetrySettings, environ: Mapping[str, str] | None = None) -> Telemetry:
    """Configure the OpenTelemetry SDK from `environ` (the process environment by default), set
    the global tracer and meter providers, and attach a log handler; `Telemetry.off()` when no
    exporter is configured, with no global provider set. Raises `TelemetryError` for a
    configuration Anvil does not support."""
    env = os.environ if environ is None else environ
    if not wanted(env):
        return Telemetry.off(
            pseudonym_key=_pseudonym_key(settings), capture_content=settings.telemetry_capture_content
        )
    from opentelemetry import metrics
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


def _pseudonym_key(settings: TelemetrySettings) -> bytes:
    if settings.telemetry_pseudonym_key is not None:
        return settings.telemetry_pseudonym_key.get_secret_value().encode()
    # Without a shared key, ids are comparable within this process only.
    return secrets.token_bytes(32)


def mcp_spans_wanted(mode: str, provider: object | None = None) -> bool:
    """Whether to keep the SDK's OpenTelemetry span around every MCP request (`ANVIL_MCP_SPANS`).

    `auto` keeps it when a tracer provider is configured (by `opentelemetry-instrument`, or code
    that runs before the app is built), so the spans reach an exporter. Without one the spans go
    nowhere, yet making them costs about a tenth of a call's CPU, so they are left out.
    `provider` is the global tracer provider unless given.
    """
    if mode != "auto":
        return mode == "on"
    current = trace.get_tracer_provider() if provider is None else provider
    return not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
