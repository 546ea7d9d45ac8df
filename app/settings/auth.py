"""Sign-in: the mode (`AuthSettings`) and the Entra app registration (`EntraSettings`)."""

from __future__ import annotations

import re
from typing import Literal, Self

from pydantic import Field, model_validator

from app.settings.base import CommaList, Part
from app.settings.stores import DataSettings
from app.urls import checked_url

MULTI_TENANT = ("organizations", "common")
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
#: An app role or scope value: one word of Entra's characters, no spaces.
_CLAIM_VALUE = re.compile(r"[\w.:/-]{1,120}")


def _is_guid(value: str) -> bool:
    return _GUID.fullmatch(value) is not None


class EntraSettings(Part):
    """The Entra tenant, the API's app registration and what a token must carry."""

    entra_tenant_id: str | None = Field(
        None,
        description=(
            "Entra tenant (directory) id, a GUID; or `organizations`/`common` for a multi-tenant app "
            "together with `ANVIL_ENTRA_ALLOWED_TENANTS`."
        ),
    )
    entra_client_id: str | None = Field(
        None, description="Application (client) id of Anvil's API app registration, a GUID."
    )
    entra_authority: str = Field(
        "https://login.microsoftonline.com",
        description="Entra authority host; sovereign clouds (and tests) set another.",
    )
    entra_required_scopes: CommaList = Field(
        default_factory=lambda: ["access_as_user"],
        description="Comma-separated delegated scopes every token must carry in `scp`.",
    )
    entra_allowed_tenants: CommaList = Field(
        default_factory=list,
        description="Comma-separated tenant ids accepted by a multi-tenant app.",
    )
    entra_app_role: str | None = Field(
        None,
        description=(
            "App role that admits app-only tokens (`roles`, no `scp`); unset: app-only tokens are refused."
        ),
    )
    entra_key_refresh_seconds: float = Field(
        300.0,
        ge=0,
        le=86_400,
        description="Least time between two refetches of Entra's signing keys on an unknown key id.",
    )

    @property
    def entra_authority_url(self) -> str:
        """The authority without a trailing slash."""
        return self.entra_authority.rstrip("/")

    def check_entra(self) -> None:
        """Raise `ValueError` naming the first Entra setting that cannot sign anyone in."""
        tenant = self.entra_tenant_id
        if not tenant:
            raise ValueError("ANVIL_AUTH_MODE=entra needs ANVIL_ENTRA_TENANT_ID (the directory id, a GUID)")
        if tenant in MULTI_TENANT:
            if not self.entra_allowed_tenants:
                raise ValueError(
                    f"ANVIL_ENTRA_TENANT_ID={tenant} accepts other directories, so "
                    "ANVIL_ENTRA_ALLOWED_TENANTS must list the tenant ids to admit"
                )
        elif not _is_guid(tenant):
            raise ValueError(
                "ANVIL_ENTRA_TENANT_ID must be a GUID, or organizations/common for a multi-tenant app"
            )
        if not all(_is_guid(t) for t in self.entra_allowed_tenants):
            raise ValueError("ANVIL_ENTRA_ALLOWED_TENANTS must list tenant GUIDs")
        if not self.entra_client_id or not _is_guid(self.entra_client_id):
            raise ValueError(
                "ANVIL_AUTH_MODE=entra needs ANVIL_ENTRA_CLIENT_ID, the API app's client id (a GUID)"
            )
        if self.entra_app_role is not None and not _CLAIM_VALUE.fullmatch(self.entra_app_role):
            raise ValueError("ANVIL_ENTRA_APP_ROLE must be one app role value, without spaces")
        if not all(_CLAIM_VALUE.fullmatch(scope) for scope in self.entra_required_scopes):
            raise ValueError("ANVIL_ENTRA_REQUIRED_SCOPES must list scope names without spaces")
        if not self.entra_required_scopes:
            raise ValueError("ANVIL_ENTRA_REQUIRED_SCOPES must name at least one delegated scope")
        try:
            checked_url(self.entra_authority, https=True, example="https://login.microsoftonline.com")
        except ValueError as error:
            raise ValueError(f"ANVIL_ENTRA_AUTHORITY {error}") from None


class AuthSettings(EntraSettings, DataSettings):
    """The sign-in mode, with what each mode needs: the Entra registration, or the data folder
    that holds the dev signing key."""

    auth_mode: Literal["dev", "entra", "none"] = Field(
        "dev",
        description=(
            "`dev`: tokens from `anvil token`, loopback only; `entra`: Microsoft Entra ID access "
            "tokens; `none`: anonymous callers, every answer one-shot."
        ),
    )

    @model_validator(mode="after")
    def _entra_can_sign_in(self) -> Self:
        if self.auth_mode == "entra":
            self.check_entra()
        return self
