"""A local stand-in for Microsoft Entra ID: discovery documents, a key set that rotates, tokens.

It listens on 127.0.0.1 in a background thread and answers what Anvil reads under an authority:

- `/{tenant}/v2.0/.well-known/openid-configuration` (v2 issuer `{authority}/{tenant}/v2.0`);
- `/{tenant}/.well-known/openid-configuration` (v1 issuer `https://sts.windows.net/{tenant}/`,
  as on the public cloud);
- the key set both documents point at, counting every fetch.

For `organizations`/`common` the issuers carry Entra's `{tenantid}` placeholder. Tokens are
minted in both versions and signed with RS256 keys made once per test run (keygen is slow).

It also signs users in the way MSAL talks to Entra, so a real MSAL client can be tested:

- `POST /{tenant}/oauth2/v2.0/devicecode` starts a device code flow; the token endpoint answers
  `authorization_pending` until the test plays the user with `approve(user_code)` (or `decline`);
- `GET /{tenant}/oauth2/v2.0/authorize` (the v2 configuration's `authorization_endpoint`) is the
  sign-in page a browser opens for the authorization code flow: it plays a user who signs in at
  once (the one `sign_in_as` names) and sends the browser back to the client's loopback redirect
  URI with a one-time code, or with `access_denied` after `refuse_next_sign_in()`. It checks the
  request as Entra does for a public client (client id, an `http://localhost` or `127.0.0.1`
  redirect URI with a port, `response_type=code`, a PKCE S256 challenge, a `state`) and answers
  the way `response_mode` asks: a 302 with the fields in the query (the default) or fragment,
  or, for `form_post` (which MSAL uses), a page whose form posts them to the redirect URI;
- `POST /{tenant}/oauth2/v2.0/token` redeems an approved device code, an authorization code
  (once, by the client it was issued to, with the same redirect URI and the PKCE verifier of
  its challenge) or a refresh token (which is rotated on every use, and can be revoked) for an
  access token of the requested API, an `id_token` (carrying the authorization request's
  `nonce`) and the `client_info` MSAL builds its account from.

MSAL only talks to an `https` authority: `EntraIssuer(tls=True)` serves TLS with a certificate
for 127.0.0.1 and localhost, signed by a throwaway CA made once per test run (`ca_file`).

Run as a program (`PYTHONPATH=tests python -m support.entra_issuer --port 8400`) it serves until
interrupted, after printing the settings that point Anvil at it and a token for a local user.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import hmac
import html
import json
import re
import secrets
import signal
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import BaseRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from support.tls import TlsFiles, tls_files

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


# --- TLS ---------------------------------------------------------------------------------------


class _TlsServer(ThreadingHTTPServer):
    """Serves HTTPS: each connection's TLS handshake runs in that connection's own thread, so a
    client that never completes one holds up nobody else (and times out)."""

    #: Seconds a connection may stay silent (handshake included) before it is dropped.
    IDLE_TIMEOUT = 10.0

    def __init__(self, address: tuple[str, int], handler: type[BaseRequestHandler], files: TlsFiles) -> None:
        super().__init__(address, handler)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(files.cert_file, files.key_file)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.IDLE_TIMEOUT)
        try:
            with self.context.wrap_socket(request, server_side=True) as tls:
                super().finish_request(tls, client_address)
        except (ssl.SSLError, OSError):
            # A client that gave up or distrusts the certificate: its own error tells the story.
            pass


# --- users signing in --------------------------------------------------------------------------

#: Scopes that ask for the sign-in itself (an id token, a refresh token), not for an API.
OIDC_SCOPES = frozenset({"openid", "profile", "offline_access", "email"})
DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEVICE_CODE_LIFETIME = 900
#: Seconds MSAL waits between polls of the token endpoint (it accepts whole seconds only).
DEVICE_CODE_INTERVAL = 1
AUTHORIZATION_CODE_GRANT = "authorization_code"
#: Seconds an authorization code can be redeemed in (Entra: about ten minutes).
AUTHORIZATION_CODE_LIFETIME = 600
#: The hosts a public client's loopback redirect URI may name (RFC 8252 §7.3).
LOOPBACK_REDIRECT_HOSTS = frozenset({"localhost", "127.0.0.1"})
_PKCE_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")
_PKCE_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")
_API_SCOPE = re.compile(r"api://([0-9a-fA-F-]{36})/([^/\s]+)")


@dataclass(frozen=True)
class SignedInUser:
    """Who approved a sign-in."""

    oid: str
    tid: str
    username: str
    name: str = "Test User"


@dataclass
class _DeviceGrant:
    client_id: str
    scopes: tuple[str, ...]
    tenant: str
    user_code: str
    expires_at: float
    polls: int = 0
    user: SignedInUser | None = None
    declined: bool = False


@dataclass(frozen=True)
class _BrowserUser:
    """Who signs in at the authorization endpoint; no `tid`: the authority's own tenant."""

    oid: str = LOCAL_USER_OID
    username: str = "user@example.invalid"
    tid: str | None = None
    name: str = "Test User"

    def in_tenant(self, tenant: str) -> SignedInUser:
        tid = self.tid or (LOCAL_TENANT if tenant in MULTI_TENANT else tenant)
        return SignedInUser(oid=self.oid, tid=tid, username=self.username, name=self.name)


@dataclass(frozen=True)
class _AuthorizationGrant:
    """What an authorization code stands for, and what redeeming it must present."""

    client_id: str
    redirect_uri: str
    scopes: tuple[str, ...]
    code_challenge: str
    nonce: str | None
    user: SignedInUser
    expires_at: float


@dataclass(frozen=True)
class _RefreshGrant:
    client_id: str
    user: SignedInUser


@dataclass
class _Answer:
    """A JSON answer: status and body."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BrowserAnswer:
    """What the authorization endpoint answers a browser: a redirect to `location`, or a page."""

    status: int
    location: str | None = None
    html: str = ""


def _entra_description(code: int, description: str) -> str:
    """`AADSTS{code}: ...` plus a trace line, as Entra writes its error descriptions."""
    return f"AADSTS{code}: {description}\r\nTrace ID: {uuid.uuid4()}\r\nTimestamp: {time.time():.0f}"


def _oauth_error(error: str, code: int, description: str) -> _Answer:
    """An Entra-style OAuth error answer of the token endpoint."""
    text = _entra_description(code, description)
    return _Answer(400, {"error": error, "error_description": text, "error_codes": [code]})


def _error_page(code: int, description: str) -> BrowserAnswer:
    """The page Entra shows when it cannot send the browser back to the client at all."""
    text = html.escape(f"AADSTS{code}: {description}")
    return BrowserAnswer(
        400,
        html=(
            "<!DOCTYPE html><html><head><title>Sign in to your account</title></head><body>"
            f"<h1>Sorry, but we're having trouble signing you in.</h1><p>{text}</p></body></html>"
        ),
    )


def _form_post_page(redirect_uri: str, fields: Mapping[str, str]) -> BrowserAnswer:
    """Entra's `response_mode=form_post` answer: a form that posts `fields` to the client."""
    inputs = "".join(
        f'<input type="hidden" name="{html.escape(name)}" value="{html.escape(value)}" />'
        for name, value in fields.items()
    )
    return BrowserAnswer(
        200,
        html=(
            "<html><head><title>Working...</title></head><body>"
            f'<form method="POST" name="hiddenform" action="{html.escape(redirect_uri)}">{inputs}'
            "<noscript><p>Script is disabled. Click Submit to continue.</p>"
            '<input type="submit" value="Submit" /></noscript></form>'
            "<script>document.hiddenform.submit();</script></body></html>"
        ),
    )


def _loopback_redirect(uri: str) -> bool:
    """Whether `uri` is a loopback redirect URI a public client may name: `http`, localhost or
    127.0.0.1, an explicit port, no user, no fragment."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return False
    return (
        parts.scheme == "http"
        and parts.hostname in LOOPBACK_REDIRECT_HOSTS
        and port is not None
        and parts.username is None
        and not parts.fragment
    )


def pkce_challenge(verifier: str) -> str:
    """The S256 code challenge of a PKCE code verifier (RFC 7636 §4.2)."""
    return b64url(hashlib.sha256(verifier.encode("ascii")).digest())


class EntraIssuer:
    """A fake Entra authority at `http://127.0.0.1:{port}` (`https://` with `tls=True`);
    `start()`/`stop()` it, or use `with`.

    It can be stopped and started again on the same port (to play an outage), and `publish`
    replaces the key set it serves (to play a key rotation).
    """

    def __init__(
        self,
        *,
        client_id: str,
        keys: Sequence[SigningKey] | None = None,
        port: int | None = None,
        tls: bool = False,
    ) -> None:
        self.client_id = client_id
        #: None until the first `start()` picks a free port (binding port 0 leaves no race).
        self.port = port
        self.tls = tls
        #: Lifetime in seconds of the access tokens the token endpoint issues from now on.
        self.access_token_lifetime = 3600
        self._lock = threading.Lock()
        #: Notified whenever a device code is issued or polled (see `wait_for_device_code`).
        self._changed = threading.Condition(self._lock)
        self._published: list[SigningKey] = list(keys or [signing_key("entra-key-1")])
        self._extra_jwks: list[dict[str, Any]] = []
        self._key_fetches = 0
        self._discovery_fetches = 0
        self._device_grants: dict[str, _DeviceGrant] = {}
        self._refresh_grants: dict[str, _RefreshGrant] = {}
        self._device_flows = 0
        self._device_polls = 0
        self._refreshes = 0
        self._browser_user = _BrowserUser()
        self._refuse_next = False
        self._authorization_grants: dict[str, _AuthorizationGrant] = {}
        self._authorization_requests = 0
        self._code_redemptions = 0
        self._last_authorization: dict[str, str] | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def authority(self) -> str:
        """`http(s)://127.0.0.1:{port}`: what Anvil's `ANVIL_ENTRA_AUTHORITY` names."""
        if self.port is None:
            raise RuntimeError("the issuer has no port until it is started (or given one)")
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM) that a TLS issuer's certificate chains to: give it to
        `requests` (`verify=`, `REQUESTS_CA_BUNDLE`) or `httpx` (`SSL_CERT_FILE`)."""
        if not self.tls:
            raise RuntimeError("the issuer serves plain http (make it with tls=True)")
        return tls_files().ca_file

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

    # --- users signing in ----------------------------------------------------------------------

    @property
    def device_flows_started(self) -> int:
        """How many device codes were issued."""
        with self._lock:
            return self._device_flows

    @property
    def device_code_polls(self) -> int:
        """How many times a device code was presented to the token endpoint."""
        with self._lock:
            return self._device_polls

    @property
    def refreshes(self) -> int:
        """How many refresh token redemptions were asked for, granted or not."""
        with self._lock:
            return self._refreshes

    @property
    def authorization_requests(self) -> int:
        """How many times the authorization endpoint was asked to sign a user in, whatever it answered."""
        with self._lock:
            return self._authorization_requests

    @property
    def authorization_code_redemptions(self) -> int:
        """How many authorization codes were presented to the token endpoint, granted or not."""
        with self._lock:
            return self._code_redemptions

    @property
    def last_authorization_request(self) -> dict[str, str] | None:
        """The parameters of the last request to the authorization endpoint (None before one)."""
        with self._lock:
            return None if self._last_authorization is None else dict(self._last_authorization)

    def sign_in_as(
        self,
        *,
        oid: str = LOCAL_USER_OID,
        username: str = "user@example.invalid",
        tid: str | None = None,
        name: str = "Test User",
    ) -> None:
        """Make the user who signs in at the authorization endpoint from now on this one (default
        tenant: the authority's own, as for `approve`)."""
        with self._lock:
            self._browser_user = _BrowserUser(oid=oid, username=username, tid=tid, name=name)

    def refuse_next_sign_in(self) -> None:
        """Play a user who cancels the next sign-in at the authorization endpoint: the browser is
        sent back with `error=access_denied` (and no code). Later sign-ins succeed again."""
        with self._lock:
            self._refuse_next = True

    def wait_for_poll(self, user_code: str, *, timeout: float = 10.0) -> None:
        """Block until the client has polled the token endpoint for `user_code` at least once."""
        with self._changed:
            grant = self._device_grant(user_code)
            if not self._changed.wait_for(lambda: grant.polls > 0, timeout):
                raise TimeoutError(f"nobody polled for device code {user_code} in {timeout} s")

    def approve(
        self,
        user_code: str,
        *,
        oid: str = LOCAL_USER_OID,
        username: str = "user@example.invalid",
        tid: str | None = None,
        name: str = "Test User",
    ) -> SignedInUser:
        """Play the user who entered `user_code` and signed in (default tenant: the flow's own)."""
        with self._changed:
            grant = self._device_grant(user_code)
            tenant = tid or (LOCAL_TENANT if grant.tenant in MULTI_TENANT else grant.tenant)
            grant.user = SignedInUser(oid=oid, tid=tenant, username=username, name=name)
            self._changed.notify_all()
            return grant.user

    def decline(self, user_code: str) -> None:
        """Play the user who entered `user_code` and then refused to sign in."""
        with self._changed:
            self._device_grant(user_code).declined = True
            self._changed.notify_all()

    def revoke_refresh_tokens(self) -> int:
        """Invalidate every refresh token issued so far (as a password reset does); returns how many."""
        with self._lock:
            count = len(self._refresh_grants)
            self._refresh_grants.clear()
            return count

    def authorize(self, path: str) -> BrowserAnswer | None:
        """The answer to a browser's GET of `path` at the authorization endpoint (None for any
        other path): a user signs in at once and is sent back to the client's redirect URI."""
        route, _, query = path.partition("?")
        parts = route.strip("/").split("/")
        if len(parts) != 4 or parts[1:] != ["oauth2", "v2.0", "authorize"]:
            return None
        params = {name: values[0] for name, values in parse_qs(query, keep_blank_values=True).items()}
        with self._lock:
            self._authorization_requests += 1
            self._last_authorization = dict(params)
            refused, self._refuse_next = self._refuse_next, False
            user = self._browser_user.in_tenant(parts[0])
        client_id, redirect_uri = params.get("client_id", ""), params.get("redirect_uri", "")
        if not client_id:
            return _error_page(900144, "The request body must contain the following parameter: 'client_id'.")
        if not _loopback_redirect(redirect_uri):
            return _error_page(
                50011,
                f"The redirect URI '{redirect_uri}' specified in the request does not match the "
                f"redirect URIs configured for the application '{client_id}'.",
            )
        mode = params.get("response_mode", "query")
        if mode not in ("query", "fragment", "form_post"):
            return _error_page(900144, f"The response_mode '{mode}' is not supported.")
        state = params.get("state", "")

        def back(**fields: str) -> BrowserAnswer:
            """Send the browser back to the client with `fields` (and the request's state)."""
            answer = {**fields, **({"state": state} if state else {})}
            if mode == "form_post":
                return _form_post_page(redirect_uri, answer)
            separator = "#" if mode == "fragment" else ("&" if "?" in redirect_uri else "?")
            return BrowserAnswer(302, location=f"{redirect_uri}{separator}{urlencode(answer)}")

        def failed(error: str, code: int, description: str) -> BrowserAnswer:
            return back(error=error, error_description=_entra_description(code, description))

        response_type = params.get("response_type", "")
        if response_type != "code":
            return failed(
                "unsupported_response_type",
                700054,
                f"response_type '{response_type}' is not enabled for the application.",
            )
        if not state:
            return failed("invalid_request", 900144, "This issuer requires a 'state' in every request.")
        challenge, method = params.get("code_challenge", ""), params.get("code_challenge_method", "")
        if method != "S256" or not _PKCE_CHALLENGE.fullmatch(challenge):
            return failed(
                "invalid_request",
                9002325,
                "Proof Key for Code Exchange is required: an S256 code_challenge of 43 characters "
                f"(got method {method or 'none'!r}).",
            )
        scopes = tuple(params.get("scope", "").split())
        if self._api_scope_names(scopes) is None:
            return failed("invalid_scope", 500011, f"No API of this tenant offers {' '.join(scopes)!r}.")
        if refused:
            return back(
                error="access_denied",
                error_subcode="cancel",
                error_description=_entra_description(65004, "User declined to consent to access the app."),
            )
        code = secrets.token_urlsafe(48)
        grant = _AuthorizationGrant(
            client_id=client_id,
            redirect_uri=redirect_uri,
            scopes=scopes,
            code_challenge=challenge,
            nonce=params.get("nonce"),
            user=user,
            expires_at=time.time() + AUTHORIZATION_CODE_LIFETIME,
        )
        with self._lock:
            self._authorization_grants[code] = grant
        return back(code=code)

    def post(self, path: str, form: Mapping[str, str]) -> _Answer:
        """The answer to a form POST of `path`: the device code and token endpoints."""
        parts = path.split("?", 1)[0].strip("/").split("/")
        if len(parts) == 4 and parts[1:3] == ["oauth2", "v2.0"]:
            if parts[3] == "devicecode":
                return self._start_device_flow(parts[0], form)
            if parts[3] == "token":
                return self._redeem(form)
        return _Answer(404, {"error": "not_found"})

    def _device_grant(self, user_code: str) -> _DeviceGrant:
        """The device flow showing `user_code` (the caller holds the lock)."""
        for grant in self._device_grants.values():
            if grant.user_code == user_code:
                return grant
        raise KeyError(f"no device flow shows the code {user_code!r}")

    def _start_device_flow(self, tenant: str, form: Mapping[str, str]) -> _Answer:
        client_id = form.get("client_id", "")
        if not client_id:
            return _oauth_error("invalid_request", 900144, "The request body must contain 'client_id'.")
        device_code = secrets.token_urlsafe(32)
        user_code = "".join(secrets.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(9))
        verification_uri = f"{self.authority}/devicelogin"
        grant = _DeviceGrant(
            client_id=client_id,
            scopes=tuple(form.get("scope", "").split()),
            tenant=tenant,
            user_code=user_code,
            expires_at=time.time() + DEVICE_CODE_LIFETIME,
        )
        with self._changed:
            self._device_grants[device_code] = grant
            self._device_flows += 1
            self._changed.notify_all()
        return _Answer(
            200,
            {
                "user_code": user_code,
                "device_code": device_code,
                "verification_uri": verification_uri,
                "expires_in": DEVICE_CODE_LIFETIME,
                "interval": DEVICE_CODE_INTERVAL,
                "message": (
                    f"To sign in, use a web browser to open the page {verification_uri} "
                    f"and enter the code {user_code} to authenticate."
                ),
            },
        )

    def _redeem(self, form: Mapping[str, str]) -> _Answer:
        grant_type = form.get("grant_type")
        if grant_type == DEVICE_CODE_GRANT:
            return self._redeem_device_code(form)
        if grant_type == AUTHORIZATION_CODE_GRANT:
            return self._redeem_authorization_code(form)
        if grant_type == "refresh_token":
            return self._redeem_refresh_token(form)
        return _oauth_error(
            "unsupported_grant_type", 70003, f"The grant type {grant_type!r} is not supported."
        )

    def _redeem_device_code(self, form: Mapping[str, str]) -> _Answer:
        device_code = form.get("device_code", "")
        with self._changed:
            self._device_polls += 1
            grant = self._device_grants.get(device_code)
            if grant is not None:
                grant.polls += 1
            self._changed.notify_all()
            if grant is None or grant.client_id != form.get("client_id"):
                return _oauth_error("invalid_grant", 70000, "The provided 'device_code' is not valid.")
            if grant.declined:
                del self._device_grants[device_code]
                return _oauth_error("authorization_declined", 70000, "The user declined to sign in.")
            if time.time() > grant.expires_at:
                del self._device_grants[device_code]
                return _oauth_error("expired_token", 70019, "Verification code expired.")
            if grant.user is None:
                return _oauth_error(
                    "authorization_pending", 70016, "OAuth 2.0 device flow error. Authorization is pending."
                )
            del self._device_grants[device_code]
            user = grant.user
        return self._issue(grant.client_id, grant.scopes, user)

    def _redeem_authorization_code(self, form: Mapping[str, str]) -> _Answer:
        """Tokens for an authorization code: once (any attempt spends it), by the client it was
        issued to, with the redirect URI it was issued for and the verifier of its challenge."""
        with self._lock:
            self._code_redemptions += 1
            grant = self._authorization_grants.pop(form.get("code", ""), None)
        if grant is None:
            return _oauth_error(
                "invalid_grant",
                54005,
                "The provided authorization code is not valid: unknown, or already redeemed.",
            )
        if time.time() > grant.expires_at:
            return _oauth_error("invalid_grant", 70008, "The provided authorization code has expired.")
        if form.get("client_id") != grant.client_id:
            return _oauth_error(
                "invalid_grant", 700005, "The provided authorization code was issued to another client."
            )
        if form.get("redirect_uri") != grant.redirect_uri:
            return _oauth_error(
                "invalid_grant",
                500112,
                f"The reply address '{form.get('redirect_uri')}' does not match the reply address "
                f"'{grant.redirect_uri}' provided when requesting the authorization code.",
            )
        verifier = form.get("code_verifier", "")
        if not _PKCE_VERIFIER.fullmatch(verifier) or not hmac.compare_digest(
            pkce_challenge(verifier), grant.code_challenge
        ):
            return _oauth_error(
                "invalid_grant",
                50148,
                "The code_verifier does not match the code_challenge supplied in the authorization request.",
            )
        return self._issue(grant.client_id, grant.scopes, grant.user, nonce=grant.nonce)

    def _redeem_refresh_token(self, form: Mapping[str, str]) -> _Answer:
        token = form.get("refresh_token", "")
        with self._lock:
            self._refreshes += 1
            grant = self._refresh_grants.get(token)
            if grant is not None and grant.client_id == form.get("client_id"):
                # Rotation: the token just used is spent; the answer carries its successor.
                del self._refresh_grants[token]
            else:
                grant = None
        if grant is None:
            return _oauth_error(
                "invalid_grant", 50173, "The provided grant has expired due to it being revoked."
            )
        return self._issue(grant.client_id, tuple(form.get("scope", "").split()), grant.user)

    def _api_scope_names(self, scopes: Sequence[str]) -> list[str] | None:
        """The scope names of this issuer's API that `scopes` asks for (beside the sign-in's own
        scopes), or None when they name no API or another one."""
        resource = [scope for scope in scopes if scope.lower() not in OIDC_SCOPES]
        matches = [_API_SCOPE.fullmatch(scope) for scope in resource]
        audiences = {match.group(1).lower() for match in matches if match}
        if not resource or None in matches or audiences != {self.client_id.lower()}:
            return None
        return [match.group(2) for match in matches if match]

    def _issue(
        self, client_id: str, scopes: Sequence[str], user: SignedInUser, *, nonce: str | None = None
    ) -> _Answer:
        """Tokens for `scopes` of this issuer's API, as Entra v2 issues them.

        The API is named by its scopes `api://{client id}/{name}`; the access token's audience
        is that client id and its `scp` the names. A token for any other API is refused. The id
        token carries `nonce` when the sign-in's authorization request had one.
        """
        names = self._api_scope_names(scopes)
        if names is None:
            return _oauth_error(
                "invalid_scope", 500011, f"No API of this tenant offers {' '.join(scopes)!r}."
            )
        resource = [scope for scope in scopes if scope.lower() not in OIDC_SCOPES]
        lifetime = self.access_token_lifetime
        access_token = self.mint_v2(
            oid=user.oid,
            tid=user.tid,
            scp=" ".join(names),
            lifetime=lifetime,
            azp=client_id,
            name=user.name,
            preferred_username=user.username,
        )
        now = int(time.time())
        id_token = self.sign(
            {
                "aud": client_id,
                "iss": self.v2_issuer(user.tid),
                "iat": now,
                "nbf": now,
                "exp": now + 3600,
                "name": user.name,
                "oid": user.oid,
                "preferred_username": user.username,
                "sub": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{client_id}/{user.tid}/{user.oid}")),
                "tid": user.tid,
                "ver": "2.0",
                **({"nonce": nonce} if nonce is not None else {}),
            }
        )
        refresh_token = secrets.token_urlsafe(48)
        with self._lock:
            self._refresh_grants[refresh_token] = _RefreshGrant(client_id=client_id, user=user)
        return _Answer(
            200,
            {
                "token_type": "Bearer",
                "scope": " ".join(resource),
                "expires_in": lifetime,
                "ext_expires_in": lifetime,
                "access_token": access_token,
                "refresh_token": refresh_token,
                "id_token": id_token,
                "client_info": b64json({"uid": user.oid, "utid": user.tid}),
            },
        )

    # --- the HTTP server -----------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the issuer's port (again, after `stop`)."""
        if self._server is not None:
            raise RuntimeError("the issuer is already running")
        address, handler = ("127.0.0.1", self.port or 0), _handler_for(self)
        if self.tls:
            server: ThreadingHTTPServer = _TlsServer(address, handler, tls_files())
        else:
            server = ThreadingHTTPServer(address, handler)
        self.port = int(server.server_address[1])
        # Request threads are joined by server_close(), so nothing outlives `stop()`.
        server.daemon_threads = False
        # A short poll interval: `stop()` (an outage, the end of a test) waits for at most one.
        serve = functools.partial(server.serve_forever, poll_interval=0.05)
        thread = threading.Thread(target=serve, name=f"entra-issuer-{self.port}")
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
            configuration = self._openid_configuration(
                issuer=self.v2_issuer(template),
                jwks_uri=f"{base}/discovery/v2.0/keys",
                endpoints=f"{base}/oauth2/v2.0",
            )
            return {**configuration, "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode"}
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
            page = issuer.authorize(self.path)
            if page is not None:
                self._send_page(page)
                return
            document = issuer.document(self.path)
            if document is None:
                self._send(404, {"error": "not_found"})
            else:
                self._send(200, document)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            fields = parse_qs(self.rfile.read(length).decode(), keep_blank_values=True)
            answer = issuer.post(self.path, {name: values[0] for name, values in fields.items()})
            self._send(answer.status, answer.body)

        def _send(self, status: int, document: Mapping[str, Any]) -> None:
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send_page(self, page: BrowserAnswer) -> None:
            body = page.html.encode()
            self.send_response(page.status)
            if page.location is not None:
                self.send_header("Location", page.location)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
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
