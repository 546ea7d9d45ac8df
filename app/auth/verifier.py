"""RS256 access-token verification: one verifier for dev tokens now and Entra ID tokens later.

Only the signing keys differ between the two (`KeySource`); issuer, audience, tenant and scope
rules are the same. Expiry is checked against an injected clock so that tests and the cache agree
on what "now" means.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

import jwt
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from app.domain.principal import Principal
from app.errors import AuthError

#: Entra access tokens are a few kilobytes; anything far larger is refused before any work.
MAX_TOKEN_LENGTH = 16_384

_MALFORMED = "The access token is malformed."

# PyJWT checks these against the real clock; we check exp/nbf ourselves against the injected
# clock, and aud/iss against rules PyJWT cannot express (the issuer depends on the token's tid).
_DECODE_OPTIONS: Any = {
    "verify_signature": True,
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": False,
    "verify_iss": False,
    "require": [],
}


class KeySource(Protocol):
    """Where the verifier gets the public key that should have signed a token."""

    async def key_for(self, kid: str | None) -> Any:
        """Return the RS256 public key for `kid`, or raise `AuthError.invalid` if none matches."""
        ...


class StaticKeySource:
    """A fixed set of public keys by key id (dev sign-in and tests)."""

    def __init__(self, keys: Mapping[str, RSAPublicKey]) -> None:
        self._keys = dict(keys)

    async def key_for(self, kid: str | None) -> RSAPublicKey:
        """Return the key registered under `kid`."""
        key = self._keys.get(kid) if kid is not None else None
        if key is None:
            raise AuthError.invalid("The access token's signing key is not known.")
        return key


class TokenVerifier:
    """Turns a bearer token into a `Principal`, or raises `AuthError` saying why it cannot."""

    def __init__(
        self,
        *,
        keys: KeySource,
        issuers_for_tenant: Callable[[str], Collection[str]],
        audiences: Collection[str],
        required_scopes: Collection[str],
        allowed_tenants: Collection[str] | None = None,
        app_role: str | None = None,
        leeway: float = 60.0,
        clock: Callable[[], float] = time.time,
        cache_size: int = 10_000,
    ) -> None:
        """`app_role` admits app-only tokens (`roles`, no `scp`) whose `roles` hold it; None refuses them."""
        if not audiences:
            raise ValueError("TokenVerifier needs at least one accepted audience.")
        if leeway < 0:
            raise ValueError("leeway must not be negative.")
        if cache_size < 0:
            raise ValueError("cache_size must not be negative.")
        if app_role is not None and (not app_role or app_role.split() != [app_role]):
            raise ValueError("app_role must be a non-empty role name without spaces.")
        self._keys = keys
        self._issuers_for_tenant = issuers_for_tenant
        self._audiences = frozenset(audiences)
        self._required_scopes = tuple(dict.fromkeys(required_scopes))
        self._allowed_tenants = None if allowed_tenants is None else frozenset(allowed_tenants)
        self._app_role = app_role
        self._leeway = leeway
        self._clock = clock
        self._cache_size = cache_size
        # Keyed by a digest so the cache never holds usable bearer tokens.
        self._cache: OrderedDict[bytes, Principal] = OrderedDict()

    async def verify(self, token: str) -> Principal:
        """Verify `token` and return who it identifies; raise `AuthError` if it is not acceptable."""
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_LENGTH:
            raise AuthError.invalid(_MALFORMED)
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._cache.get(digest)
        if cached is not None:
            if self._clock() < cached.expires_at:
                return cached
            # Past exp: drop it and verify from scratch, which applies the leeway and refuses.
            del self._cache[digest]

        principal = await self._verify_uncached(token)
        self._remember(digest, principal)
        return principal

    def _remember(self, digest: bytes, principal: Principal) -> None:
        if self._cache_size == 0:
            return
        while len(self._cache) >= self._cache_size:
            self._cache.popitem(last=False)
        self._cache[digest] = principal

    async def _verify_uncached(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthError.invalid(_MALFORMED) from None
        # Refuse "none", HS256 (key confusion) and the rest before touching any key.
        if header.get("alg") != "RS256":
            raise AuthError.invalid("The access token must be signed with RS256.")

        key = await self._keys.key_for(header.get("kid"))
        try:
            claims = jwt.decode(token, key, algorithms=["RS256"], options=_DECODE_OPTIONS)
        except jwt.InvalidSignatureError:
            raise AuthError.invalid("The access token's signature is invalid.") from None
        except jwt.DecodeError:
            raise AuthError.invalid(_MALFORMED) from None
        except jwt.PyJWTError:
            raise AuthError.invalid("The access token is invalid.") from None
        return self._principal_from(claims)

    def _principal_from(self, claims: dict[str, Any]) -> Principal:
        now = self._clock()
        exp = _timestamp(claims, "exp")
        if exp is None:
            raise AuthError.invalid("The access token has no valid expiry time.")
        if now > exp + self._leeway:
            raise AuthError.invalid("The access token has expired.")
        if "nbf" in claims:
            nbf = _timestamp(claims, "nbf")
            if nbf is None:
                raise AuthError.invalid("The access token has an invalid not-before time.")
            if now + self._leeway < nbf:
                raise AuthError.invalid("The access token is not valid yet.")

        if not self._audience_matches(claims.get("aud")):
            raise AuthError.invalid("The access token was issued for another audience.")

        tid = _identifier(claims, "tid")
        oid = _identifier(claims, "oid")
        if tid is None:
            raise AuthError.invalid("The access token has no tenant id (tid).")
        if oid is None:
            raise AuthError.invalid("The access token has no user object id (oid).")
        # The trusted issuer is derived from the token's own tenant, so one rule serves single-
        # and multi-tenant apps: a token cannot claim one tenant while issued by another.
        iss = claims.get("iss")
        if not isinstance(iss, str) or iss not in self._issuers_for_tenant(tid):
            raise AuthError.invalid("The access token's issuer is not trusted.")
        if self._allowed_tenants is not None and tid not in self._allowed_tenants:
            raise AuthError.invalid("The access token's tenant is not allowed.")

        scp = claims.get("scp")
        if scp is None:
            return self._app_principal(claims, oid=oid, tid=tid, exp=exp)
        if not isinstance(scp, str):
            raise AuthError.invalid("The access token's scope claim (scp) is invalid.")
        scopes = frozenset(scp.split())
        if any(scope not in scopes for scope in self._required_scopes):
            raise AuthError.insufficient_scope(self._required_scopes)

        return Principal(
            oid=oid,
            tid=tid,
            scopes=scopes,
            expires_at=exp,
            name=_display_name(claims),
        )

    def _app_principal(self, claims: Mapping[str, Any], *, oid: str, tid: str, exp: float) -> Principal:
        """An app-only token (client credentials): the calling app itself, if it holds the app role."""
        if self._app_role is None:
            raise AuthError.invalid("App-only access tokens are not accepted; sign in as a user.")
        roles = claims.get("roles")
        if not isinstance(roles, list) or self._app_role not in roles:
            # Genuine, but the app was not granted the role: more privileges needed, not a new token.
            raise AuthError(
                403,
                "insufficient_scope",
                f"The app-only access token lacks the required app role ({self._app_role}).",
            )
        # oid and tid are the calling app's service principal and its tenant.
        return Principal(oid=oid, tid=tid, scopes=frozenset(), expires_at=exp, name=_display_name(claims))

    def _audience_matches(self, aud: object) -> bool:
        if isinstance(aud, str):
            return aud in self._audiences
        # RFC 7519 allows a list; Entra sends a string, but a list naming us is equally valid.
        if isinstance(aud, list):
            return any(isinstance(item, str) and item in self._audiences for item in aud)
        return False


def _timestamp(claims: Mapping[str, Any], name: str) -> float | None:
    """A NumericDate claim as a float, or None if absent or not a finite number."""
    value = claims.get(name)
    # bool is an int subclass; NaN and Infinity parse from JSON and would defeat the checks.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return number if math.isfinite(number) else None


def _identifier(claims: Mapping[str, Any], name: str) -> str | None:
    value = claims.get(name)
    return value if isinstance(value, str) and value.strip() else None


def _display_name(claims: Mapping[str, Any]) -> str | None:
    for name in ("name", "preferred_username"):
        value = claims.get(name)
        if isinstance(value, str) and value:
            return value
    return None
