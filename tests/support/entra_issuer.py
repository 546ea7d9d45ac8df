"""A local stand-in for Microsoft Entra ID: discovery documents, a key set that rotates, tokens.

It listens on 127.0.0.1 in a background thread and answers what Anvil reads under an authority:

- `/{tenant}/v2.0/.well-known/openid-configuration` (v2 issuer `{authority}/{tenant}/v2.0`);
- `/{tenant}/.well-known/openid-configuration` (v1 issuer `https://sts.windows.net/{tenant}/`,
  as on the public cloud);
- the key set both documents point at, counting every fetch.

For `organizations`/`common` the issuers carry Entra's `{tenantid}` placeholder. Tokens are
minted in both versions and signed with RS256 keys made once per test run (keygen is slow).

Run as a program (`PYTHONPATH=tests python -m support.entra_issuer --port 8400`) it serves until
interrupted, after printing the settings that point Anvil at it and a token for a local user.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import hmac
import json
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class EntraIssuer:
    """A fake Entra authority at `http://127.0.0.1:{port}`; `start()`/`stop()` it, or use `with`.

    It can be stopped and started again on the same port (to play an outage), and `publish`
    replaces the key set it serves (to play a key rotation).
    """

    def __init__(
        self,
        *,
        client_id: str,
        keys: Sequence[SigningKey] | None = None,
        port: int | None = None,
    ) -> None:
        self.client_id = client_id
        #: None until the first `start()` picks a free port (binding port 0 leaves no race).
        self.port = port
        self._lock = threading.Lock()
        self._published: list[SigningKey] = list(keys or [signing_key("entra-key-1")])
        self._extra_jwks: list[dict[str, Any]] = []
        self._key_fetches = 0
        self._discovery_fetches = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def authority(self) -> str:
        """`http://127.0.0.1:{port}`: what Anvil's `ANVIL_ENTRA_AUTHORITY` names."""
        if self.port is None:
            raise RuntimeError("the issuer has no port until it is started (or given one)")
        return f"http://127.0.0.1:{self.port}"

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

    # --- the HTTP server -----------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the issuer's port (again, after `stop`)."""
        if self._server is not None:
            raise RuntimeError("the issuer is already running")
        server = ThreadingHTTPServer(("127.0.0.1", self.port or 0), _handler_for(self))
        self.port = int(server.server_address[1])
        # Request threads are joined by server_close(), so nothing outlives `stop()`.
        server.daemon_threads = False
        thread = threading.Thread(target=server.serve_forever, name=f"entra-issuer-{self.port}")
        thread.start()
        self._server, self._thread = server, thread

    def stop(self) -> None:
        """Stop listening and join the server thread."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=10)

    def __enter__(self) -> EntraIssuer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def document(self, path: str) -> dict[str, Any] | None:
        """The JSON answer for a GET of `path`, or None for a 404."""
        parts = path.split("?", 1)[0].strip("/").split("/")
        if not parts or not parts[0]:
            return None
        tenant, rest = parts[0], "/".join(parts[1:])
        template = "{tenantid}" if tenant in MULTI_TENANT else tenant
        base = f"{self.authority}/{tenant}"
        if rest == "v2.0/.well-known/openid-configuration":
            self._count(discovery=True)
            return self._openid_configuration(
                issuer=self.v2_issuer(template),
                jwks_uri=f"{base}/discovery/v2.0/keys",
                endpoints=f"{base}/oauth2/v2.0",
            )
        if rest == ".well-known/openid-configuration":
            self._count(discovery=True)
            return self._openid_configuration(
                issuer=self.v1_issuer(template), jwks_uri=f"{base}/discovery/keys", endpoints=f"{base}/oauth2"
            )
        if rest in ("discovery/v2.0/keys", "discovery/keys"):
            self._count(discovery=False)
            return self.jwks()
        return None

    def _count(self, *, discovery: bool) -> None:
        with self._lock:
            if discovery:
                self._discovery_fetches += 1
            else:
                self._key_fetches += 1

    @staticmethod
    def _openid_configuration(*, issuer: str, jwks_uri: str, endpoints: str) -> dict[str, Any]:
        return {
            "issuer": issuer,
            "jwks_uri": jwks_uri,
            "authorization_endpoint": f"{endpoints}/authorize",
            "token_endpoint": f"{endpoints}/token",
            "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
            "subject_types_supported": ["pairwise"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "profile", "email", "offline_access"],
        }


def _handler_for(issuer: EntraIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            document = issuer.document(self.path)
            body = json.dumps(document if document is not None else {"error": "not_found"}).encode()
            self.send_response(200 if document is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest shows failures, not every request."""

    return Handler


@contextmanager
def running_issuer(client_id: str, **kwargs: Any) -> Iterator[EntraIssuer]:
    """An `EntraIssuer` started for the block and always stopped."""
    issuer = EntraIssuer(client_id=client_id, **kwargs)
    issuer.start()
    try:
        yield issuer
    finally:
        issuer.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a local issuer until interrupted; print Anvil's settings and a token first."""
    parser = argparse.ArgumentParser(description="A local Entra ID stand-in for trying Anvil's entra mode.")
    parser.add_argument("--port", type=int, default=8400, help="port on 127.0.0.1 (default 8400)")
    parser.add_argument("--tenant", default=LOCAL_TENANT, help="tenant id of the token")
    parser.add_argument("--client-id", default=LOCAL_CLIENT_ID, help="the API app's client id (aud)")
    parser.add_argument("--oid", default=LOCAL_USER_OID, help="object id of the user the token names")
    parser.add_argument("--lifetime", type=int, default=3600, help="token lifetime in seconds")
    args = parser.parse_args(argv)
    issuer = EntraIssuer(client_id=args.client_id, port=args.port)
    # SIGTERM ends the program like Ctrl+C does: through the `finally` that stops the server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    issuer.start()
    try:
        token = issuer.mint_v2(oid=args.oid, tid=args.tenant, lifetime=args.lifetime)
        sys.stdout.write(
            "ANVIL_AUTH_MODE=entra\n"
            f"ANVIL_ENTRA_AUTHORITY={issuer.authority}\n"
            f"ANVIL_ENTRA_TENANT_ID={args.tenant}\n"
            f"ANVIL_ENTRA_CLIENT_ID={args.client_id}\n"
            f"TOKEN={token}\n"
        )
        sys.stdout.flush()
        sys.stderr.write("Serving until interrupted (Ctrl+C).\n")
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        issuer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
