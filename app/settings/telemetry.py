"""Logs (`LoggingSettings`) and OpenTelemetry (`TelemetrySettings`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from app.settings.base import Part
from app.settings.stores import DataSettings

LogLevel = Literal["debug", "info", "warning", "error"]
McpSpans = Literal["auto", "on", "off"]


class LoggingSettings(Part):
    """The log level and format, and whether each request is logged."""

    log_level: LogLevel = Field("info", description="Log level.")
    log_format: Literal["json", "text"] = Field(
        "json", description="`json`: one JSON object per line on standard output; `text`: plain lines."
    )
    access_log: bool = Field(
        False, description="Log one line per request: method, route, status, duration (costs CPU: see docs)."
    )


class TelemetrySettings(DataSettings):
    """What telemetry records and how it signs in; batches not yet sent wait in the data folder."""

    telemetry_aad_auth: bool = Field(
        False,
        description="Send to Application Insights signed in with the managed identity (`AZURE_CLIENT_ID`).",
    )
    telemetry_capture_content: bool = Field(
        False, description="Put questions and answers on the answer engine's spans (off: never exported)."
    )
    telemetry_pseudonym_key: SecretStr | None = Field(
        None,
        description=(
            "Key of the hashes that stand for user and conversation ids in telemetry; the same on "
            "every replica to correlate them. Unset: a random key per process."
        ),
    )
    mcp_spans: McpSpans = Field(
        "auto",
        description=(
            "OpenTelemetry spans for MCP requests (the SDK's span per message): `auto` keeps them "
            "when a tracer provider is configured at start-up, `on` always, `off` never."
        ),
    )
