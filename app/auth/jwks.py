"""Entra ID's signing keys: a `KeySource` backed by a JSON Web Key Set fetched over HTTP.

Keys are cached by key id. A token naming an unknown `kid` triggers a refetch, at most once per
cooldown (`ANVIL_ENTRA_KEY_REFRESH_SECONDS`), and concurrent requests share the fetch in flight:
a flood of made-up key ids costs Entra one request per cooldown at most. A failed fetch keeps
the cached keys, so an Entra outage does not sign anybody out. Nothing is fetched until a token
or the readiness probe needs a key, so Anvil starts even when Entra cannot be reached.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from jwt.algorithms import RSAAlgorithm

from app.errors import AuthError, Unavailable

logger = logging.getLogger(__name__)

#: Discovery documents and key sets are a few kilobytes; refuse to buffer anything far larger.
MAX_DOCUMENT_BYTES = 1_048_576
#: While no key has ever been loaded, retry at least this often (or every cooldown, if shorter).
EMPTY_RETRY_SECONDS = 10.0
MIN_KEY_BITS = 2048

_UNKNOWN_KEY = "The access token's signing key is not known."
_NO_KEYS = "The signing keys to check access tokens cannot be loaded right now; try again shortly."


class SigningKeysUnavailable(Unavailable):
    """No signing key could be loaded yet (Entra unreachable or answering nonsense)."""


async def get_json(client: httpx.AsyncClient, url: str) -> Any:
    """GET `url` and decode its JSON body; raise `ValueError` or `httpx.HTTPError` if that fails.

    The request is a client span (HTTP semantic conventions) when a tracer provider is set; key
    fetches are rare, so the OpenTelemetry API's no-op costs nothing worth counting otherwise.
    """
    from opentelemetry import trace

    tracer = trace.get_tracer("anvil")
    with tracer.start_as_current_span(
        "GET", kind=trace.SpanKind.CLIENT, attributes={"http.request.method": "GET", "url.full": url}
    ) as span:
        async with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
            span.set_attribute("http.response.status_code", response.status_code)
            response.raise_for_status()
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ValueError(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
    return json.loads(body)


def signing_keys(document: object) -> dict[str, RSAPublicKey]:
    """The RS256 verification keys of a JWKS document, by kid.

    Only RSA keys meant for signatures (`use` "sig" or absent) with a kid are taken; keys of
    other types, for encryption, for another algorithm, or shorter than 2048 bits are skipped.
    """
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError("the key set has no 'keys' list")
    keys: dict[str, RSAPublicKey] = {}
    for jwk in entries:
        if not isinstance(jwk, dict) or jwk.get("kty") != "RSA" or jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid")
        if not isinstance(kid, str) or not kid or jwk.get("alg", "RS256") != "RS256":
            continue
        key = _rsa_public_key(jwk)
        if key is not None and key.key_size >= MIN_KEY_BITS:
            keys[kid] = key
    return keys


def _rsa_public_key(jwk: Mapping[str, Any]) -> RSAPublicKey | None:
    try:
        key = RSAAlgorithm.from_jwk(dict(jwk))
    except Exception:  # any malformed entry is skipped, whatever PyJWT raises for it
        return None
    # A JWK carrying private parts parses as a private key; only its public half is needed.
    if isinstance(key, RSAPrivateKey):
        return key.public_key()
    return key if isinstance(key, RSAPublicKey) else None


class JwksKeySource:
    """Keys from a JWKS endpoint: cached by kid, refetched on an unknown kid at most once per cooldown.

    `jwks_uri` is the key set's URL, or an async callable that finds it (Entra's discovery
    document); it is called only when keys are fetched. Use on one event loop; `aclose` stops a
    fetch in flight (the HTTP client belongs to the caller).
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        jwks_uri: str | Callable[[], Awaitable[str]],
        *,
        refresh_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if refresh_seconds < 0:
            raise ValueError("refresh_seconds must not be negative.")
        self._client = client
        self._jwks_uri = jwks_uri
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._keys: dict[str, RSAPublicKey] = {}
        self._last_attempt: float | None = None
        self._in_flight: asyncio.Task[None] | None = None

    @property
    def kids(self) -> frozenset[str]:
        """The key ids currently cached."""
        return frozenset(self._keys)

    async def key_for(self, kid: str | None) -> RSAPublicKey:
        """The public key named `kid`, refetching the key set once if it is unknown and allowed."""
        if not isinstance(kid, str) or not kid:
            raise AuthError.invalid(_UNKNOWN_KEY)
        key = self._keys.get(kid)
        if key is None:
            await self._refresh()
            key = self._keys.get(kid)
        if key is None and not self._keys:
            # Nothing is known to be wrong with the token: Entra is out of reach. A 401 would send
            # the client to sign in again for nothing; a 503 says to retry.
            raise SigningKeysUnavailable(_NO_KEYS, retry_after=self._retry_interval())
        if key is None:
            raise AuthError.invalid(_UNKNOWN_KEY)
        return key

    async def ensure_loaded(self) -> None:
        """Readiness: return if any key is cached, else try to load; raise `SigningKeysUnavailable`."""
        if not self._keys:
            await self._refresh()
        if not self._keys:
            raise SigningKeysUnavailable(_NO_KEYS, retry_after=self._retry_interval())

    async def aclose(self) -> None:
        """Cancel a fetch in flight."""
        task, self._in_flight = self._in_flight, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _retry_interval(self) -> float:
        if self._keys:
            return self._refresh_seconds
        return min(self._refresh_seconds, EMPTY_RETRY_SECONDS)

    async def _refresh(self) -> None:
        """Fetch the key set unless one was fetched within the cooldown; join a fetch in flight."""
        task = self._in_flight
        if task is None:
            now = self._clock()
            if self._last_attempt is not None and now - self._last_attempt < self._retry_interval():
                return
            self._last_attempt = now
            task = asyncio.create_task(self._fetch())
            self._in_flight = task
        # Shielded: a caller that gives up (client gone) must not cancel the others' fetch.
        await asyncio.shield(task)

    async def _fetch(self) -> None:
        url = "the key set"
        try:
            url = self._jwks_uri if isinstance(self._jwks_uri, str) else await self._jwks_uri()
            keys = signing_keys(await get_json(self._client, url))
            if not keys:
                raise ValueError("the key set holds no RSA signing key")
        except Exception as error:  # whatever went wrong, the cached keys keep serving
            logger.warning(
                "could not load signing keys from %s (%s: %s); %d cached keys stay in use",
                url,
                type(error).__name__,
                error,
                len(self._keys),
            )
        else:
            # Replace, not merge: a key Entra withdrew must stop verifying tokens.
            self._keys = keys
            logger.info("loaded %d signing keys from %s", len(keys), url)
        finally:
            self._in_flight = None
