"""Telemetry from the environment: which variables switch an exporter on, what is left alone
without one (no SDK imported, no global provider set, the API's no-op instruments), and whether
MCP requests get the SDK's OpenTelemetry spans (`ANVIL_MCP_SPANS`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.server.lowlevel import Server
from opentelemetry import metrics, trace
from pydantic import SecretStr

from app.mcp_server.server import build_mcp_server
from app.settings import Settings
from app.telemetry.instruments import Telemetry
from app.telemetry.setup import TelemetryError, mcp_spans_wanted, start, wanted

TESTS = Path(__file__).resolve().parents[2]


def test_telemetry_is_wanted_only_when_an_exporter_is_configured() -> None:
    assert not wanted({})
    assert not wanted({"OTEL_SERVICE_NAME": "anvil"})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert wanted({"APPLICATIONINSIGHTS_CONNECTION_STRING": "InstrumentationKey=x"})


def test_without_an_exporter_the_instruments_are_the_api_no_op_and_no_provider_is_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    installed: list[object] = []
    monkeypatch.setattr(trace, "set_tracer_provider", installed.append)
    monkeypatch.setattr(metrics, "set_meter_provider", installed.append)
    settings = Settings(store="memory", answer_engine="echo", data_dir=tmp_path)
    telemetry = start(settings, {"OTEL_SERVICE_NAME": "anvil"})
    assert isinstance(telemetry, Telemetry)
    assert isinstance(telemetry.tracer, trace.NoOpTracer)
    assert isinstance(telemetry.instruments.asks, metrics.NoOpCounter)
    assert isinstance(telemetry.instruments.requests, metrics.NoOpHistogram)
    with telemetry.tracer.start_as_current_span("anything") as span:
        assert not span.is_recording()
    assert installed == []
    telemetry.shutdown()  # nothing to flush, and no error for it


def test_without_an_exporter_ids_still_get_the_configured_pseudonyms(tmp_path: Path) -> None:
    key = SecretStr("shared-key-of-every-replica")
    settings = Settings(store="memory", answer_engine="echo", data_dir=tmp_path, telemetry_pseudonym_key=key)
    assert start(settings, {}).pseudonym("oid") == start(settings, {}).pseudonym("oid")


def test_an_otlp_protocol_other_than_http_protobuf_is_refused_by_name(tmp_path: Path) -> None:
    settings = Settings(store="memory", answer_engine="echo", data_dir=tmp_path)
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    with pytest.raises(TelemetryError, match=r"'grpc' is not supported.*4318"):
        start(settings, environ)


def test_without_an_exporter_no_part_of_the_sdk_is_imported(fresh_process: dict[str, Any]) -> None:
    assert fresh_process["sdk_modules"] == []


class ConfiguredProvider(trace.TracerProvider):
    """A tracer provider such as an exporter's, as the API sees it."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return trace.NoOpTracer()


@pytest.mark.parametrize(
    ("mode", "provider", "wanted"),
    [
        ("auto", trace.ProxyTracerProvider(), False),  # nothing configured
        ("auto", trace.NoOpTracerProvider(), False),
        ("auto", ConfiguredProvider(), True),
        ("on", trace.ProxyTracerProvider(), True),
        ("off", ConfiguredProvider(), False),
    ],
)
def test_spans_are_kept_when_a_tracer_provider_would_export_them(
    mode: str, provider: object, wanted: bool
) -> None:
    assert mcp_spans_wanted(mode, provider) is wanted


def is_span_middleware(middleware: object) -> bool:
    return type(middleware).__name__ == "OpenTelemetryMiddleware"


def span_middleware(settings: Settings) -> int:
    server = build_mcp_server(settings, spans=settings.mcp_spans)
    return sum(map(is_span_middleware, server.middleware))


def test_the_sdk_span_middleware_is_its_only_default() -> None:
    """Anvil opts out of the SDK's spans by clearing the default middleware list; if the SDK adds
    another default, this fails so that the opt-out can be looked at again."""
    defaults = Server("x").middleware
    assert len(defaults) == 1 and is_span_middleware(defaults[0])


@pytest.mark.parametrize(
    ("mode", "configured", "count"), [("auto", False, 0), ("auto", True, 1), ("on", False, 1)]
)
def test_the_mcp_server_carries_the_span_middleware_only_when_wanted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str, configured: bool, count: int
) -> None:
    provider = ConfiguredProvider() if configured else trace.ProxyTracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    settings = Settings(
        auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path, mcp_spans=mode
    )
    assert span_middleware(settings) == count


# What only a fresh process shows, in one: which modules building the app without an exporter
# imports, then (a global tracer provider can be set only once per process) the spans one tool
# call gives under a configured provider in each `ANVIL_MCP_SPANS` mode, each in an app of its own.
FRESH_PROCESS = """
import asyncio, json, sys

from app.main import create_app
from app.settings import Settings

create_app(Settings(store="memory", answer_engine="echo", data_dir=sys.argv[1]))
prefixes = ("opentelemetry.sdk", "opentelemetry.exporter", "azure.monitor")
sdk_modules = sorted(m for m in sys.modules if m.startswith(prefixes))

from opentelemetry import trace

names = []

class Tracer(trace.NoOpTracer):
    def start_as_current_span(self, name, *args, **kwargs):
        names.append(name)
        return super().start_as_current_span(name, *args, **kwargs)

class Provider(trace.TracerProvider):
    def get_tracer(self, *args, **kwargs):
        return Tracer()

trace.set_tracer_provider(Provider())

from support.asgi import client

async def spans_of_one_call(mode):
    settings = Settings(
        auth_mode="none", store="memory", answer_engine="echo", data_dir=sys.argv[1], mcp_spans=mode
    )
    app = create_app(settings)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "ask", "arguments": {"question": "traced?"}}}
    names.clear()
    async with client(app) as http:
        accept = {"Accept": "application/json, text/event-stream"}
        reply = await http.post("/mcp", json=call, headers=accept)
        assert reply.status_code == 200 and "result" in reply.json(), reply.text
    return list(names)

async def main():
    spans = {mode: await spans_of_one_call(mode) for mode in sys.argv[2:]}
    print(json.dumps({"sdk_modules": sdk_modules, "spans": spans}))

asyncio.run(main())
"""

MODES = ("auto", "off")


@pytest.fixture(scope="module")
def fresh_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "APPLICATIONINSIGHTS_", "ANVIL_"))
    }
    ran = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(tmp_path_factory.mktemp("fresh")), *MODES],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS.parent,
        env={**env, "PYTHONPATH": str(TESTS)},
    )
    assert ran.returncode == 0, ran.stderr
    seen: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return seen


@pytest.mark.parametrize(("mode", "spans"), [("auto", ["tools/call ask"]), ("off", [])])
def test_a_configured_tracer_provider_receives_a_span_per_tool_call(
    fresh_process: dict[str, Any], mode: str, spans: list[str]
) -> None:
    assert fresh_process["spans"][mode] == spans
