"""Sign-in per `ANVIL_AUTH_MODE`: the verifier and what the RFC 9728 document advertises."""

from __future__ import annotations

import anyio

from app.auth.opened import AuthSetup
from app.settings.auth import AuthSettings


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
