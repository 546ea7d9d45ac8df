"""The stand-in Entra authority's keys and tokens (`support.entra_issuer`): RSA keys made once per
test run, the key set an issuer publishes, the claims of v1, v2 and app-only access tokens, and
tokens signed (or not) in the ways the security tests need."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

V1_ISSUER_HOST = "https://sts.windows.net"
#: The tenant and API app the security tests (and a local run) use.
LOCAL_TENANT = "7f3e9c1a-2b4d-4e6f-8a0b-1c2d3e4f5a6b"
LOCAL_CLIENT_ID = "c4a1e2f3-5b6d-4c7e-9f80-a1b2c3d4e5f6"
LOCAL_USER_OID = "3b9e8f4c-1d2a-4c6b-9e7f-5a0d1c2b3e4f"
MULTI_TENANT = ("organizations", "common")
SCOPE = "access_as_user"


@functools.cache
def _private_key(kid: str) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass(frozen=True)
class SigningKey:
    """An RSA key pair under a key id."""

    kid: str
    private_key: rsa.RSAPrivateKey

    @property
    def public_pem(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def jwk(self) -> dict[str, Any]:
        """The public key as Entra publishes it (no `alg`, `use` sig)."""
        jwk = dict(RSAAlgorithm.to_jwk(self.private_key.public_key(), as_dict=True))
        return {**jwk, "kid": self.kid, "use": "sig"}


def signing_key(kid: str) -> SigningKey:
    """The key for `kid`: made on first use, then the same for the whole test run."""
    return SigningKey(kid, _private_key(kid))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(value: Mapping[str, Any]) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def unsigned_token(claims: Mapping[str, Any], header: Mapping[str, Any]) -> str:
    """`header.claims.` with an empty signature (for `alg: none`)."""
    return f"{b64json(header)}.{b64json(claims)}."


def hs256_token(claims: Mapping[str, Any], secret: bytes, kid: str) -> str:
    """An HS256 token keyed with `secret` (PyJWT refuses a PEM public key as an HMAC secret)."""
    signing_input = f"{b64json({'alg': 'HS256', 'typ': 'JWT', 'kid': kid})}.{b64json(claims)}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


class EntraKeySet:
    """The key set an `EntraIssuer` publishes and the tokens it signs with it; the issuer holds
    the state (`_lock`, `_published`, the fetch counts)."""

    # --- the key set ---------------------------------------------------------------------------

    @property
    def key(self) -> SigningKey:
        """The key tokens are signed with by default: the first one published."""
        with self._lock:
            return self._published[0]

    @property
    def key_fetches(self) -> int:
        """How many times the key set was fetched."""
        with self._lock:
            return self._key_fetches

    @property
    def discovery_fetches(self) -> int:
        with self._lock:
            return self._discovery_fetches

    def publish(self, *keys: SigningKey, extra: Sequence[Mapping[str, Any]] = ()) -> None:
        """Serve exactly `keys` from now on (first = default signing key), plus raw `extra` JWKs."""
        with self._lock:
            self._published = list(keys)
            self._extra_jwks = [dict(entry) for entry in extra]

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            return {"keys": [*self._extra_jwks, *(key.jwk() for key in self._published)]}

    # --- tokens --------------------------------------------------------------------------------

    def v2_issuer(self, tid: str) -> str:
        return f"{self.authority}/{tid}/v2.0"

    @staticmethod
    def v1_issuer(tid: str) -> str:
        return f"{V1_ISSUER_HOST}/{tid}/"

    def claims_v2(
        self,
        *,
        oid: str,
        tid: str,
        scp: str | None = SCOPE,
        lifetime: int = 3600,
        now: float | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        """A delegated v2 access token's claims; an override of None removes that claim."""
        issued = int(time.time() if now is None else now)
        claims: dict[str, Any] = {
            "aud": self.client_id,
            "iss": self.v2_issuer(tid),
            "iat": issued,
            "nbf": issued,
            "exp": issued + lifetime,
            "aio": "fake",
            "azp": "aebc6443-996d-45c2-90f0-388ff96faa56",
            "azpacr": "0",
            "name": "Test User",
            "oid": oid,
            "preferred_username": "user@example.invalid",
            "rh": "fake",
            "scp": scp,
            "sub": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{tid}/{oid}")),
            "tid": tid,
            "uti": uuid.uuid4().hex[:22],
            "ver": "2.0",
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def claims_v1(
        self,
        *,
        oid: str,
        tid: str,
        scp: str | None = SCOPE,
        lifetime: int = 3600,
        now: float | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        """A delegated v1 access token's claims: `sts.windows.net` issuer, `api://` audience."""
        claims = self.claims_v2(oid=oid, tid=tid, scp=scp, lifetime=lifetime, now=now)
        for name in ("azp", "azpacr"):
            claims.pop(name)
        claims.update(
            {
                "aud": f"api://{self.client_id}",
                "iss": self.v1_issuer(tid),
                "appid": "aebc6443-996d-45c2-90f0-388ff96faa56",
                "appidacr": "0",
                "upn": "user@example.invalid",
                "ver": "1.0",
            }
        )
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def claims_app(self, *, oid: str, tid: str, roles: Sequence[str], **overrides: Any) -> dict[str, Any]:
        """An app-only (client credentials) v2 token's claims: `roles`, no `scp`."""
        claims = self.claims_v2(oid=oid, tid=tid, scp=None, name=None, preferred_username=None)
        claims.update({"roles": list(roles), "idtyp": "app", "sub": oid})
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def sign(
        self, claims: Mapping[str, Any], *, key: SigningKey | None = None, kid: str | None = None
    ) -> str:
        """RS256-sign `claims` with `key` (default: the current key), naming `kid` (default: its own)."""
        key = key or self.key
        header = {"typ": "JWT", "kid": kid or key.kid}
        return jwt.encode(dict(claims), key.private_key, algorithm="RS256", headers=header)

    def mint_v2(self, *, oid: str, tid: str, **overrides: Any) -> str:
        return self.sign(self.claims_v2(oid=oid, tid=tid, **overrides))

    def mint_v1(self, *, oid: str, tid: str, **overrides: Any) -> str:
        return self.sign(self.claims_v1(oid=oid, tid=tid, **overrides))

    def _count(self, *, discovery: bool) -> None:
        with self._lock:
            if discovery:
                self._discovery_fetches += 1
            else:
                self._key_fetches += 1
