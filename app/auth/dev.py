"""Local dev sign-in: the server's side of the dev key (`app.devkey`), verifying what it mints.

Dev tokens go through the same `TokenVerifier` as Entra tokens; only the key source and the
issuer URL differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from app.auth.verifier import StaticKeySource, TokenVerifier
from app.devkey import (
    DEV_AUTHORITY,
    DEV_CLIENT_ID,
    DEV_KID,
    DEV_SCOPE,
    DEV_TENANT_ID,
    KEY_FILE_NAME,
    MAX_TTL_SECONDS,
    DevKey,
    user_oid,
)

__all__ = [
    "DEV_AUTHORITY",
    "DEV_CLIENT_ID",
    "DEV_KID",
    "DEV_SCOPE",
    "DEV_TENANT_ID",
    "KEY_FILE_NAME",
    "MAX_TTL_SECONDS",
    "DevIssuer",
    "user_oid",
]


class DevIssuer(DevKey):
    """Mints and verifies dev access tokens with one RSA key."""

    def verifier(
        self,
        *,
        clock: Callable[[], float] = time.time,
        allowed_tenants: Collection[str] | None = None,
    ) -> TokenVerifier:
        """A `TokenVerifier` accepting this issuer's tokens for any tenant (or `allowed_tenants`)."""
        return TokenVerifier(
            keys=StaticKeySource({self.kid: self.public_key}),
            issuers_for_tenant=lambda tid: (self.issuer(tid),),
            audiences=(DEV_CLIENT_ID, f"api://{DEV_CLIENT_ID}"),
            required_scopes=(DEV_SCOPE,),
            allowed_tenants=allowed_tenants,
            clock=clock,
        )
