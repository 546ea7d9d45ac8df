"""Sign-in per `ANVIL_AUTH_MODE`: the verifier and what the RFC 9728 document advertises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from app.domain.ports import Verifier
from app.settings.auth import AuthSettings


@dataclass(frozen=True, slots=True)
class AuthSetup:
    """The verifier (None when anonymous), what clients are told to sign in with, and lifecycle hooks.

    `readiness` raises when the key source cannot serve (reported by `/readyz`); `aclose`
    releases what the mode opened (HTTP clients).
    """

    verifier: Verifier | None
    authorization_servers: tuple[str, ...] = ()
    scopes_supported: tuple[str, ...] = ()
    readiness: Callable[[], Awaitable[None]] | None = None
    aclose: Callable[[], Awaitable[None]] | None = None


async def open_auth(settings: AuthSettings) -> AuthSetup:
    """Prepare sign-in for the configured mode (reads or creates the dev key off the event loop)."""
    if settings.auth_mode == "none":
        return AuthSetup(verifier=None)
    if settings.auth_mode == "entra":
        from app.auth.entra import open_entra

        return await open_entra(settings)
    from app.auth.dev import (
        DEV_AUTHORITY,
        DEV_CLIENT_ID,
        DEV_SCOPE,
        DEV_TENANT_ID,
        KEY_FILE_NAME,
        DevIssuer,
    )
    from app.private_files import warn_if_open

    def load() -> DevIssuer:
        # The server only verifies dev tokens; `anvil token`, which signs, loads the key fully checked.
        loaded = DevIssuer.load_or_create(settings.data_dir, verify_only=True)
        warn_if_open(settings.data_dir, settings.data_dir / KEY_FILE_NAME)
        return loaded

    issuer = await anyio.to_thread.run_sync(load)
    return AuthSetup(
        verifier=issuer.verifier(),
        authorization_servers=(f"{DEV_AUTHORITY}/{DEV_TENANT_ID}/v2.0",),
        scopes_supported=(f"api://{DEV_CLIENT_ID}/{DEV_SCOPE}",),
    )


def protected_resource_metadata(resource_url: str, setup: AuthSetup) -> dict[str, object]:
    """The RFC 9728 document for the MCP endpoint at `resource_url`."""
    return {
        "resource": resource_url,
        "authorization_servers": list(setup.authorization_servers),
        "scopes_supported": list(setup.scopes_supported),
        "bearer_methods_supported": ["header"],
        "resource_name": "Anvil",
    }
