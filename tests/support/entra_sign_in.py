"""Users signing in at the stand-in Entra authority (`support.entra_issuer`) the way MSAL talks to
Entra: the device code flow, the authorization code flow with PKCE (its sign-in page and the
redirect back), refresh tokens, and the tokens each grant redeems for."""

from __future__ import annotations

import hashlib
import hmac
import html
import re
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from support.entra_keys import LOCAL_TENANT, LOCAL_USER_OID, MULTI_TENANT, b64json, b64url

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


class EntraSignIn:
    """The sign-in endpoints of an `EntraIssuer` and what a test plays of its users; the issuer
    holds the state (`_lock`, `_changed`, the grants and their counts) and signs the tokens."""

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
