"""Logging for `anvil serve`: JSON lines with the trace of their span, tokens redacted on every
handler, the SDK's per-request noise kept quiet."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from app.settings import Settings
from app.telemetry.logs import (
    AZURE_HTTP_LOGGERS,
    AZURE_LOGGERS,
    QUIET_LOGGERS,
    SERVER_LOGGERS,
    JsonFormatter,
    configure_logging,
)
from app.telemetry.redaction import TokenRedactor


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("anvil.test", logging.INFO, __file__, 1, message, args, None)
    made.__dict__.update(extra)
    return made


def test_json_log_lines_carry_the_trace_of_their_span() -> None:
    formatter = JsonFormatter()
    plain = json.loads(formatter.format(record("hello %s", "world")))
    assert plain["message"] == "hello world" and "trace_id" not in plain
    with TracerProvider().get_tracer("anvil").start_as_current_span("outer") as span:
        inside = json.loads(formatter.format(record("hello %s", "world")))
    assert inside["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert inside["span_id"] == f"{span.get_span_context().span_id:016x}"
    assert inside["level"] == "INFO" and inside["logger"] == "anvil.test"
    assert inside["time"].endswith("Z")


def test_extra_fields_are_kept_and_private_ones_left_out() -> None:
    line = json.loads(
        JsonFormatter().format(record("x", route="/mcp", status=200, _clean=True, path=Path("/a")))
    )
    assert (line["route"], line["status"], line["path"]) == ("/mcp", 200, "/a")
    assert "_clean" not in line


@pytest.fixture
def restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    named = {
        name: logging.getLogger(name).level for name in (*QUIET_LOGGERS, *AZURE_LOGGERS, *AZURE_HTTP_LOGGERS)
    }
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, was in named.items():
        logging.getLogger(name).setLevel(was)


@pytest.mark.usefixtures("restored")
@pytest.mark.parametrize(("log_format", "formatter"), [("json", JsonFormatter), ("text", logging.Formatter)])
def test_serve_logging_has_one_redacting_handler_in_the_chosen_format(
    tmp_path: Path, log_format: str, formatter: type[logging.Formatter]
) -> None:
    configure_logging(Settings(data_dir=tmp_path, log_format=log_format, log_level="warning"))
    (handler,) = logging.getLogger().handlers
    assert type(handler.formatter) is formatter
    assert any(isinstance(f, TokenRedactor) for f in handler.filters)
    assert logging.getLogger().level == logging.WARNING
    for name in SERVER_LOGGERS:
        assert any(isinstance(f, TokenRedactor) for f in logging.getLogger(name).filters)
    for name in QUIET_LOGGERS:
        assert logging.getLogger(name).level >= logging.WARNING


@pytest.mark.usefixtures("restored")
@pytest.mark.parametrize(
    ("level", "azure"), [("info", logging.WARNING), ("error", logging.ERROR), ("debug", logging.DEBUG)]
)
def test_the_azure_sdks_say_only_warnings_unless_debugging_and_never_a_request(
    tmp_path: Path, level: str, azure: int
) -> None:
    configure_logging(Settings(data_dir=tmp_path, log_level=level))
    for name in ("azure.storage.blob", "azure.identity", "azure.cosmos"):
        assert logging.getLogger(name).getEffectiveLevel() == azure, name
    for name in AZURE_HTTP_LOGGERS:  # each request's URL and headers: not even at debug
        assert logging.getLogger(name).getEffectiveLevel() >= max(logging.WARNING, azure), name
