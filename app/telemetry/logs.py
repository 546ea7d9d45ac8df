"""Logging for `anvil serve` (JSON lines by default, with the trace of the span they were logged
in), with every token-shaped string scrubbed before it is written, and whether MCP requests get
OpenTelemetry spans.

Anvil itself never logs a token, but libraries log what they are given (a tool's error text, an
exception message quoting a header), so a filter on every handler removes anything that looks
like a credential: JWT-shaped strings (`eyJ...` in three or more base64url segments), the value
after `Bearer`, and `access_token=`-style parameters.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from app.settings import Settings

REDACTED = "[REDACTED]"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: uvicorn gives these loggers handlers of their own that the root handlers never see.
SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
#: The SDK logs every stateless request's transport teardown at INFO: noise, not news.
QUIET_LOGGERS = ("mcp.server.streamable_http", "mcp.server.streamable_http_manager")

_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*){2,}")
# RFC 6750 b64token after the scheme name, also URL-encoded (`Bearer%20...`, `Bearer+...`).
_BEARER = re.compile(r"\b(bearer)(?:\s+|%20|\+)[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
_TOKEN_PARAMETER = re.compile(
    r"\b(access_token|id_token|refresh_token|client_secret)([\"']?\s*[=:]\s*[\"']?)[^\s&\"',;]+",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """`text` with every token-shaped part replaced by `[REDACTED]`."""
    text = _JWT.sub(REDACTED, text)
    text = _BEARER.sub(rf"\1 {REDACTED}", text)
    return _TOKEN_PARAMETER.sub(rf"\1\2{REDACTED}", text)


def _scrubbed(value: Any) -> Any:
    """`value` itself when it shows no token, else its text with the tokens redacted."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else str(value)
    clean = redact(text)
    if clean == text:
        return value
    return clean


class TokenRedactor(logging.Filter):
    """Scrubs token-shaped strings from a record's message, arguments, traceback and stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_clean", False):
            # Built only from values Anvil chose (the access log): nothing to scrub.
            return True
        record.msg = _scrubbed(record.msg)
        if isinstance(record.args, Mapping):
            record.args = {key: _scrubbed(value) for key, value in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(_scrubbed(value) for value in record.args)
        if record.exc_info and not record.exc_text:
            # Formatters reuse a cached exc_text, so formatting it here is what they will print.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def install_redactor(target: logging.Handler | logging.Logger) -> None:
    """Add a `TokenRedactor` to a handler or logger, once."""
    if not any(isinstance(existing, TokenRedactor) for existing in target.filters):
        target.addFilter(TokenRedactor())


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
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def configure_logging(settings: Settings) -> None:
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
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def mcp_spans_wanted(mode: str, provider: object | None = None) -> bool:
    """Whether to keep the SDK's OpenTelemetry span around every MCP request (`ANVIL_MCP_SPANS`).

    `auto` keeps it when a tracer provider is configured (by `opentelemetry-instrument`, or code
    that runs before the app is built), so the spans reach an exporter. Without one the spans go
    nowhere, yet making them costs about a tenth of a call's CPU, so they are left out.
    `provider` is the global tracer provider unless given.
    """
    if mode != "auto":
        return mode == "on"
    from opentelemetry import trace

    current = trace.get_tracer_provider() if provider is None else provider
    return not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
