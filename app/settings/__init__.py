"""Anvil's settings, read from `ANVIL_*` environment variables: one model composed of a part per
component.

Each part (`app.settings.<module>`) declares the fields of one component with their own checks;
`Settings` inherits them all, so the variables stay flat (`ANVIL_COSMOS_ENDPOINT`) and
`Settings(**values)` takes any field. A factory takes only its part (`CosmosStore.open(settings:
CosmosSettings)`), so the type checker proves it reads nothing else, and the composition root
passes the one `Settings`, which is every part. Checks that span parts (unsafe combinations) are
here. Every field has a description; `docs/configuration.md` lists them all (a test keeps the two
in step). A misconfigured service stops at start-up with one clear line instead of misbehaving
later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from pydantic import ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.settings.auth import AuthSettings
from app.settings.base import LIST_FORMS, CommaList, parse_list
from app.settings.embeddings import EmbeddingSettings
from app.settings.engines import EngineSettings
from app.settings.history import HistorySettings
from app.settings.serve import HttpLimits, ServeSettings
from app.settings.stores import StoreSettings
from app.settings.telemetry import LoggingSettings, TelemetrySettings
from app.urls import is_loopback

__all__ = [
    "LIST_FORMS",
    "PARTS",
    "CommaList",
    "Settings",
    "describe_error",
    "parse_list",
    "unknown_variables",
]


class Settings(
    BaseSettings,
    ServeSettings,
    AuthSettings,
    StoreSettings,
    EngineSettings,
    EmbeddingSettings,
    HistorySettings,
    HttpLimits,
    LoggingSettings,
    TelemetrySettings,
):
    """Every setting Anvil reads. Environment variables carry the `ANVIL_` prefix."""

    model_config = SettingsConfigDict(env_prefix="ANVIL_", extra="ignore", frozen=True)

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Self:
        if self.auth_mode == "dev" and not is_loopback(self.host):
            raise ValueError(
                f"ANVIL_AUTH_MODE=dev signs in anyone holding the local key, so it only binds to loopback "
                f"(got host {self.host!r}); use --host 127.0.0.1 or configure real sign-in"
            )
        if self.embeddings == "azure-openai" and not self.azure_openai_endpoint:
            raise ValueError(
                "ANVIL_EMBEDDINGS=azure-openai needs ANVIL_AZURE_OPENAI_ENDPOINT (the resource its "
                "embeddings deployment is in)"
            )
        return self


#: The parts `Settings` is composed of, each with the fields it declares itself.
PARTS = tuple(base for base in Settings.__bases__ if base is not BaseSettings)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """`ANVIL_*` variables that name no setting (typos would otherwise be silently ignored)."""
    known = {f"ANVIL_{name.upper()}" for name in Settings.model_fields}
    return sorted(name for name in environ if name.upper().startswith("ANVIL_") and name.upper() not in known)


def describe_error(error: Exception) -> str:
    """One line naming each invalid setting and why, for start-up failures."""
    if not isinstance(error, ValidationError):
        return str(error)
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"])
        msg = item["msg"].removeprefix("Value error, ")
        parts.append(f"ANVIL_{field.upper()}: {msg}" if field else msg)
    return "; ".join(parts)
