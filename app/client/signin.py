"""Signing a person in to a remote Anvil with Microsoft Entra ID: `anvil login`, `logout`, `bridge`.

`UserSignIn` signs the user in with MSAL, in a web browser (`login_in_browser`, coming back to a
`LoopbackListener`) or with the device code flow (`login`), and keeps the tokens in the persistent
cache of `token_cache`, from which `token()` hands out access tokens silently, refreshing them
before they expire, until the refresh token stops working. Where to sign in, and for what, comes
from the server (`discovery.discover`).

Every call here blocks (MSAL is synchronous); async callers run them in a worker thread. Errors
are `SignInError`s whose message is one line for the user. No token is ever logged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt
import msal  # type: ignore[import-untyped, unused-ignore]
from msal_extensions.persistence import PersistenceError  # type: ignore[import-untyped, unused-ignore]

from app import __version__
from app.client.discovery import HTTP_TIMEOUT, SignInSettings
from app.client.errors import SignInError, SignInFailed, SignInRequired, SignInUnavailable, first_line
from app.client.loopback import LoopbackListener, browser_available, open_in_web_browser
from app.client.token_cache import open_cache
from app.urls import is_loopback

#: Seconds `login_in_browser` waits, by default, for the user to finish signing in in the browser.
BROWSER_SIGN_IN_TIMEOUT = 300.0


@dataclass(frozen=True)
class Account:
    """A signed-in user: the name they signed in with, their object id and tenant id."""

    username: str
    oid: str
    tenant_id: str


class UserSignIn:
    """One user's sign-in to one authority, for one client, with tokens in a persistent cache.

    Creating it opens the cache and nothing else; the first call that needs the authority reads
    its OpenID configuration. Calls are serialised, so concurrent `token()` calls for a token
    about to expire make one refresh. `encrypted` tells whether the OS encrypts the cache (see
    `app.client.token_cache`).

    `http_client` (a `requests.Session`-like object) and `instance_discovery` are handed to MSAL.
    Instance discovery (checking the authority with Microsoft's cloud list) stays on except
    for a loopback authority, which can only be a local stand-in. `timeout` (seconds) applies to
    MSAL's own HTTP client, when none is given. `encrypt=False` keeps the cache a plain
    owner-only file even where the OS offers encryption.
    """

    def __init__(
        self,
        settings: SignInSettings,
        *,
        http_client: object | None = None,
        instance_discovery: bool | None = None,
        encrypt: bool = True,
        timeout: float = HTTP_TIMEOUT,
    ) -> None:
        self.settings = settings
        parts = urlsplit(settings.authority)
        if parts.scheme != "https" or not parts.hostname or not parts.path.strip("/"):
            raise SignInError(f"{settings.authority} is not an https sign-in authority with a tenant")
        self._environment = parts.hostname.lower()
        self._realm = parts.path.strip("/").split("/")[0].lower()
        if instance_discovery is None:
            instance_discovery = not is_loopback(parts.hostname)
        self._msal_options: dict[str, Any] = {
            "authority": settings.authority,
            "http_client": http_client,
            "instance_discovery": instance_discovery,
            "timeout": timeout,
            "app_name": "anvil",
            "app_version": __version__,
        }
        self._cache, self.encrypted = open_cache(settings.cache_path, encrypt=encrypt)
        self._lock = threading.Lock()
        self._app: Any = None

    def token(self, *, force_refresh: bool = False) -> str:
        """An access token for the API: the cached one while it has five minutes left, else a
        fresh one from the refresh token. `force_refresh=True` (after a 401) skips the cached one.

        Raises `SignInRequired` when nobody is signed in or the refresh token no longer works.
        """
        with self._lock:
            entry = self._account_entry()
            if entry is None:
                raise SignInRequired(f"not signed in to {self._where()}: run `{self._login_command()}`")
            result = self._call(
                lambda app: app.acquire_token_silent_with_error(
                    list(self.settings.scopes), entry, force_refresh=force_refresh
                )
            )
        token = result.get("access_token") if isinstance(result, dict) else None
        if isinstance(token, str):
            return token
        reason = _describe_error(result) if isinstance(result, dict) else "no refresh token is cached"
        raise SignInRequired(
            f"sign-in to {self._where()} has to be renewed ({reason}): run `{self._login_command()}`"
        )

    def login(self, *, prompt: Callable[[str], None]) -> Account:
        """Sign in with the device code flow: `prompt` shows the user where to go and the code to
        enter; this returns once they have signed in there (or raises `SignInFailed`).

        Any other account cached for this authority is forgotten: the new one replaces it.
        """
        scopes = list(self.settings.scopes)
        with self._lock:
            flow = self._call(lambda app: app.initiate_device_flow(scopes=scopes))
            if not isinstance(flow, dict) or "user_code" not in flow:
                reason = _describe_error(flow) if isinstance(flow, dict) else "no answer"
                raise SignInFailed(f"{self.settings.authority} did not start a sign-in: {reason}")
            prompt(str(flow["message"]))
            result = self._call(lambda app: app.acquire_token_by_device_flow(flow))
            if not isinstance(result, dict) or "access_token" not in result:
                raise SignInFailed(_device_flow_failure(result))
            return self._keep_only(result)

    def login_in_browser(
        self,
        *,
        open_browser: Callable[[str], None] | None = None,
        timeout: float = BROWSER_SIGN_IN_TIMEOUT,
    ) -> Account:
        """Sign in in a web browser: the authorization code flow with PKCE, as a public client.

        `open_browser(url)` shows the user the authority's sign-in page (default: the `webbrowser`
        module, which honours `$BROWSER`); it may return at once, as browsers do. The user picks
        an account there (`prompt=select_account`), and the browser comes back to a listener on
        `http://localhost:<free port>` here, which takes the answer only as a form post carrying
        the request's `state`, shows a page saying the sign-in is done (or why not), and stops.

        Raises `SignInFailed` when the user cancels or has not finished within `timeout` seconds,
        `SignInUnavailable` when no browser can be opened (sign in with `login` instead). Any
        other account cached for this authority is forgotten: the new one replaces it.
        """
        scopes = list(self.settings.scopes)
        fallback = f"{self._login_command()} --device-code"
        try:
            listener = LoopbackListener(open_browser or open_in_web_browser, fallback)
        except OSError as error:
            raise SignInUnavailable(
                f"cannot listen on 127.0.0.1 for the browser's answer: {first_line(error)}"
            ) from None
        with self._lock, listener:
            try:
                result = self._call(
                    lambda app: app.acquire_token_interactive(
                        scopes,
                        prompt="select_account",
                        timeout=timeout,
                        # MSAL's redirect URI is http://localhost:{port}; the answer comes to
                        # the listener bound there (MSAL's `auth_code_receiver` interface).
                        port=listener.port,
                        auth_code_receiver=listener,
                    )
                )
            except msal.BrowserInteractionTimeoutError:
                raise SignInFailed(
                    f"sign-in was not completed in the browser within {timeout:g} seconds: sign in again"
                ) from None
            except RuntimeError as error:  # MSAL's word for an answer that fails its checks (nonce)
                raise SignInFailed(f"sign-in failed: {first_line(error)}") from None
            if not isinstance(result, dict) or "access_token" not in result:
                raise SignInFailed(_browser_failure(result))
            return self._keep_only(result)

    def logout(self) -> list[str]:
        """Forget every account of this authority and this client's tokens for it; returns the
        user names forgotten (none when nobody was signed in). Works offline."""
        with self._lock:
            entries = self._account_entries()
            for entry in entries:
                self._forget(entry)
            return [str(entry.get("username") or entry.get("local_account_id") or "") for entry in entries]

    def who(self) -> Account | None:
        """The signed-in account for this authority, from the cache (offline), or None."""
        with self._lock:
            entries = self._account_entries()
            return self._account_of(entries[0]) if entries else None

    # --- inside --------------------------------------------------------------------------------

    def _where(self) -> str:
        return self.settings.server_url or self.settings.authority

    def _login_command(self) -> str:
        return f"anvil login --url {self.settings.server_url or 'URL'}"

    def _call(self, action: Callable[[Any], object]) -> object:
        """Run `action` with the MSAL application, turning failures to reach the authority or to
        use the cache into one-line errors."""
        authority = self.settings.authority
        try:
            if self._app is None:
                # It reads the authority's OpenID configuration right away.
                self._app = msal.PublicClientApplication(
                    self.settings.client_id, token_cache=self._cache, **self._msal_options
                )
            return action(self._app)
        except PersistenceError as error:
            raise SignInUnavailable(
                f"cannot use the token cache {self.settings.cache_path}: {first_line(error)}"
            ) from None
        except OSError as error:  # requests' errors are OSErrors
            raise SignInUnavailable(
                f"cannot reach the sign-in service {authority}: {first_line(error)}"
            ) from None
        except ValueError as error:  # MSAL's word for an authority it cannot use
            raise SignInUnavailable(f"cannot sign in at {authority}: {first_line(error)}") from None

    def _keep_only(self, result: Mapping[str, Any]) -> Account:
        """The account a sign-in's `result` names, once every other account of this authority is
        forgotten (the caller holds the lock)."""
        claims = result.get("id_token_claims") or {}
        entries = self._account_entries()
        kept = next((entry for entry in entries if entry.get("local_account_id") == claims.get("oid")), None)
        if kept is None:
            raise SignInFailed(f"{self.settings.authority} signed a user in but sent no account details")
        for entry in entries:
            if entry.get("home_account_id") != kept.get("home_account_id"):
                self._forget(entry)
        return self._account_of(kept)

    def _account_entries(self) -> list[dict[str, Any]]:
        """The cached accounts of this authority (its host and tenant)."""
        try:
            entries = self._cache.search(
                msal.TokenCache.CredentialType.ACCOUNT, query={"environment": self._environment}
            )
            return [dict(entry) for entry in entries if str(entry.get("realm", "")).lower() == self._realm]
        except (PersistenceError, ValueError) as error:
            raise SignInUnavailable(
                f"cannot read the token cache {self.settings.cache_path} "
                f"(delete it and sign in again): {first_line(error)}"
            ) from None

    def _account_entry(self) -> dict[str, Any] | None:
        entries = self._account_entries()
        return entries[0] if entries else None

    def _account_of(self, entry: Mapping[str, Any]) -> Account:
        claims: dict[str, Any] = {}
        query = {**self._owned_by(entry), "realm": entry.get("realm")}
        for id_token in self._cache.search(msal.TokenCache.CredentialType.ID_TOKEN, query=query):
            claims = _unverified_claims(str(id_token.get("secret", "")))
            break
        return Account(
            username=str(entry.get("username") or claims.get("preferred_username") or ""),
            oid=str(claims.get("oid") or entry.get("local_account_id") or ""),
            tenant_id=str(claims.get("tid") or entry.get("realm") or ""),
        )

    def _owned_by(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """This client's items of the account's user (in every tenant: refresh tokens are not
        tenant-bound)."""
        return {
            "home_account_id": entry.get("home_account_id"),
            "environment": entry.get("environment"),
            "client_id": self.settings.client_id,
        }

    def _forget(self, entry: Mapping[str, Any]) -> None:
        """Remove this client's tokens of the account's user, then the account itself."""
        cache, kinds = self._cache, msal.TokenCache.CredentialType
        owned = self._owned_by(entry)
        for kind, remove in (
            (kinds.REFRESH_TOKEN, cache.remove_rt),
            (kinds.ACCESS_TOKEN, cache.remove_at),
            (kinds.ID_TOKEN, cache.remove_idt),
        ):
            for item in list(cache.search(kind, query=owned)):
                remove(item)
        cache.remove_account(dict(entry))


def sign_in_here(sign_in: UserSignIn, *, device_code: bool, say: Callable[[str], None]) -> Account:
    """Sign the user in: in a web browser where one can be opened here (unless `device_code`),
    else with the device code flow; `say` tells the user what is going on (and the code)."""
    if not device_code and browser_available():
        say("signing in in your web browser...")
        return sign_in.login_in_browser()
    return sign_in.login(prompt=say)


def ensure_signed_in(sign_in: UserSignIn, say: Callable[[str], None]) -> None:
    """Make sure `sign_in` holds a working token, signing the user in (`sign_in_here`) when it
    does not, and then saying who signed in."""
    try:
        sign_in.token()
    except SignInRequired:
        account = sign_in_here(sign_in, device_code=False, say=say)
        say(f"signed in as {account.username}")


def _unverified_claims(token: str) -> dict[str, Any]:
    """The claims of a cached id token, for display only (it came straight from the authority)."""
    try:
        return dict(jwt.decode(token, options={"verify_signature": False}))
    except jwt.PyJWTError:
        return {}


def _describe_error(result: Mapping[str, Any]) -> str:
    """An OAuth error answer in a few words: its description's first line, else its code."""
    description = result.get("error_description")
    if description:
        return first_line(description)
    return str(result.get("error") or "no token in the answer")


def _browser_failure(result: object) -> str:
    error = result.get("error") if isinstance(result, dict) else None
    if error == "access_denied":
        return "sign-in was declined in the browser"
    reason = _describe_error(result) if isinstance(result, dict) else "no answer"
    return f"sign-in failed: {reason}"


def _device_flow_failure(result: object) -> str:
    error = result.get("error") if isinstance(result, dict) else None
    if error == "authorization_declined":
        return "sign-in was declined"
    if error in ("expired_token", "code_expired"):
        return "the sign-in code expired before it was used: sign in again"
    reason = _describe_error(result) if isinstance(result, dict) else "no answer"
    return f"sign-in failed: {reason}"
