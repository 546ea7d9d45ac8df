"""Logging for `anvil serve`: JSON lines by default, with the trace of the span they were logged
in, and every token-shaped string scrubbed (`app.telemetry.redaction`) before it is written."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from opentelemetry import trace

from app.settings.telemetry import LoggingSettings
from app.telemetry.redaction import install_redactor

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: uvicorn gives these loggers handlers of their own that the root handlers never see.
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
#: The SDK logs every stateless request's transport teardown at INFO: noise, not news.
QUIET_LOGGERS = ("mcp.server.streamable_http", "mcp.server.streamable_http_manager")
#: The Azure SDKs (Blob Storage, identity, Cosmos DB) log every request at INFO, its URL and
#: headers with it (a replica looking for a new index every second wrote 42 records in 20 s):
#: warnings and errors only, unless `ANVIL_LOG_LEVEL=debug`.
AZURE_LOGGERS = ("azure",)
#: What logs each request's and answer's headers: not even at debug, since some of their values
#: are logged as they are.
AZURE_HTTP_LOGGERS = (
    "azure.core.pipeline.policies.http_logging_policy",
    "azure.cosmos._cosmos_http_logging_policy",
)


#: Attributes of every record; anything else on a record was passed as `extra` and is kept.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    # uvicorn's copy of its message with terminal colours.
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the trace and span ids of the
    span it was logged in (if any), the exception, and the record's `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = _span_context()
        if context is not None:
            event["trace_id"], event["span_id"] = context
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                event[key] = (
                    value if isinstance(value, str | int | float | bool) or value is None else str(value)
                )
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            event["exception"] = record.exc_text
        return json.dumps(event, ensure_ascii=False)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime(datefmt or "%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))


def _span_context() -> tuple[str, str] | None:
    """The current span's trace and span ids in hex, or None outside a recorded span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def configure_logging(settings: LoggingSettings) -> None:
    """Root logging at `ANVIL_LOG_LEVEL`, with tokens redacted from every record: JSON lines on
    standard output (`ANVIL_LOG_FORMAT=json`, the default), or plain text on standard error."""
    root = logging.getLogger()
    if settings.log_format == "json":
        handler: logging.Handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(JsonFormatter())
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    for handler in root.handlers:
        install_redactor(handler)
    # A filter on a logger sees only records logged on that logger itself, so each of uvicorn's
    # loggers gets one; uvicorn's own configuration, applied later, keeps existing filters.
    for name in SERVER_LOGGERS:
        install_redactor(logging.getLogger(name))
    for name in QUIET_LOGGERS + AZURE_HTTP_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    for name in AZURE_LOGGERS:
        logging.getLogger(name).setLevel(
            root.level if settings.log_level == "debug" else max(logging.WARNING, root.level)
        )
