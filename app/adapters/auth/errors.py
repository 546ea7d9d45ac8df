"""Why a bearer token was refused, in the terms of RFC 6750.

The HTTP layer turns an `AuthError` into a 401 or 403 with a `WWW-Authenticate: Bearer` header.
Descriptions are fixed sentences written here and in the verifier: they never quote the token or
any claim taken from it, so they are safe to return to the caller and to log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

AuthErrorCode = Literal["invalid_token", "insufficient_scope"]


class AuthError(Exception):
    """A bearer token was missing, invalid, or lacked a scope the operation needs."""

    def __init__(
        self,
        status: Literal[401, 403],
        error: AuthErrorCode,
        description: str,
        scope: str | None = None,
    ) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description
        #: For 403 only: the scopes the operation needs, space-separated as in RFC 6750.
        self.scope = scope

    @classmethod
    def invalid(cls, description: str) -> AuthError:
        """A 401 `invalid_token`: the token cannot be trusted (bad, expired, foreign, ...)."""
        return cls(401, "invalid_token", description)

    @classmethod
    def insufficient_scope(cls, scopes: Iterable[str]) -> AuthError:
        """A 403 `insufficient_scope`: the token is genuine but was not granted `scopes`."""
        # A bare string would otherwise be iterated character by character.
        names = scopes.split() if isinstance(scopes, str) else list(scopes)
        scope = " ".join(names)
        return cls(
            403,
            "insufficient_scope",
            f"The access token lacks a required scope ({scope}).",
            scope=scope,
        )

    def __repr__(self) -> str:
        return f"AuthError({self.status}, {self.error!r}, {self.description!r})"
