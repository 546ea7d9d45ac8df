"""Signing a person in to a remote Anvil with Microsoft Entra ID: `anvil login`, `logout`, `bridge`.

`discover(url)` reads the server's RFC 9728 document and says where to sign in (the tenant's
authority) and for what (the API's scopes). `UserSignIn` signs the user in with MSAL, in a web
browser (`login_in_browser`) or with the device code flow (`login`), and keeps the tokens in a
persistent cache, from which `token()` hands out access tokens silently, refreshing them before
they expire, until the refresh token stops working.

The browser sign-in is the authorization code flow with PKCE of a public client (RFC 8252): the
browser opens the authority's sign-in page and comes back to a listener on this machine's
loopback interface (`http://localhost:<free port>`, which the app registration must allow).
It needs a browser on the user's screen, on this machine: `browser_available()` says whether
there is one (see its rule); where there is not (SSH sessions, containers, servers), the device
code flow signs in from any other device.

The cache (`SignInSettings.cache_path`, default `token-cache.bin` in Anvil's config folder, or
`ANVIL_TOKEN_CACHE`) is encrypted where the operating system offers it: DPAPI on Windows, the
Keychain on macOS, libsecret on Linux. Where it does not (Linux without libsecret or a D-Bus
session: servers, containers, CI), it is a plain file readable by its owner only (0600) in a
folder that, when this module creates it, is the owner's only (0700). `UserSignIn.encrypted`
says which one is in use.

Every call here blocks (MSAL is synchronous); async callers run them in a worker thread. Errors
are `SignInError`s whose message is one line for the user. No token is ever logged.
"""

from __future__ import annotations

import contextlib
import hmac
import html
import logging
import os
import re
import socket
import sys
import threading
import webbrowser
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import msal  # type: ignore[import-untyped, unused-ignore]
from msal_extensions import (  # type: ignore[import-untyped, unused-ignore]
    FilePersistence,
    PersistedTokenCache,
    build_encrypted_persistence,
)
from msal_extensions.persistence import PersistenceError  # type: ignore[import-untyped, unused-ignore]

from app import __version__
from app.auth.dev import DEV_AUTHORITY
from app.private_files import private_file
from app.settings import is_loopback

logger = logging.getLogger(__name__)

#: The Azure CLI's public client id: Anvil's deployment pre-authorises it on the API app, so
#: users sign in without registering a client of their own (azure-identity's default too).
DEFAULT_CLIENT_ID = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
#: Environment variable naming the token cache file (overrides the default location).
TOKEN_CACHE_VARIABLE = "ANVIL_TOKEN_CACHE"
CACHE_FILE_NAME = "token-cache.bin"
METADATA_PATH = "/.well-known/oauth-protected-resource"
#: Seconds for any one request to the server or to the sign-in service.
HTTP_TIMEOUT = 10.0
#: Seconds `login_in_browser` waits, by default, for the user to finish signing in in the browser.
BROWSER_SIGN_IN_TIMEOUT = 300.0
#: Environment variables an SSH server sets in the sessions it opens.
SSH_VARIABLES = ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY")

#: Scopes MSAL adds to every sign-in by itself (and refuses to be given).
_SIGN_IN_SCOPES = frozenset({"openid", "profile", "offline_access"})
_API_SCOPE = re.compile(r"(api://\S+)/([^/\s]+)")
_DEV_HOST = urlsplit(DEV_AUTHORITY).hostname


class SignInError(Exception):
    """Signing in did not work; the message is one line saying why and what to do."""


class DiscoveryError(SignInError):
    """The server's sign-in settings could not be read."""


class ServerUnreachable(DiscoveryError):
    """Nothing answered at the server's address."""


class SignInNotNeeded(DiscoveryError):
    """The server does not ask for sign-in (no RFC 9728 document): connect without a token."""


class DevServer(DiscoveryError):
    """The server is a local dev server: its tokens come from `anvil token`, not from Entra."""


class SignInRequired(SignInError):
    """No cached account or refresh token works any more: the user must run `anvil login`."""


class SignInFailed(SignInError):
    """A sign-in was started but did not succeed (declined, expired, refused by Entra)."""


class SignInUnavailable(SignInError):
    """The sign-in service (or the token cache) could not be used just now."""


def default_cache_path(environ: Mapping[str, str] | None = None) -> Path:
    """`ANVIL_TOKEN_CACHE`, else `token-cache.bin` in Anvil's config folder.

    The folder is `%APPDATA%\\anvil` on Windows, else `$XDG_CONFIG_HOME/anvil` or `~/.config/anvil`.
    """
    env = os.environ if environ is None else environ
    if env.get(TOKEN_CACHE_VARIABLE):
        return Path(env[TOKEN_CACHE_VARIABLE]).expanduser()
    if sys.platform == "win32":
        appdata = env.get("APPDATA")
        base = Path(appdata) if appdata else Path.home() / "AppData" / "Roaming"
    else:
        xdg = env.get("XDG_CONFIG_HOME")
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "anvil" / CACHE_FILE_NAME


@dataclass(frozen=True)
class SignInSettings:
    """Where and for what a user signs in, and where the tokens are kept.

    `authority`: the tenant's authority (`https://login.microsoftonline.com/<tenant>`);
    `scopes`: the API's scopes (`api://<API client id>/access_as_user`); `client_id`: the public
    client that signs in; `server_url`: the Anvil server, named in the hints of errors.
    """

    authority: str
    scopes: tuple[str, ...]
    client_id: str = DEFAULT_CLIENT_ID
    cache_path: Path = field(default_factory=default_cache_path)
    server_url: str | None = None


@dataclass(frozen=True)
class Account:
    """A signed-in user: the name they signed in with, their object id and tenant id."""

    username: str
    oid: str
    tenant_id: str


# --- discovery -----------------------------------------------------------------------------------


def metadata_urls(url: str) -> list[str]:
    """Where the RFC 9728 document of the server at `url` may be, in the order to try.

    Path-aware first (RFC 9728 §3.1: the well-known prefix goes before the resource's path;
    a bare server URL means its `/mcp` endpoint), then the document at the root.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DiscoveryError(f"{url} is not an http(s) URL of an Anvil server")
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/") or "/mcp"
    return [f"{origin}{METADATA_PATH}{path}", f"{origin}{METADATA_PATH}"]


def discover(
    url: str,
    *,
    http: httpx.Client | None = None,
    client_id: str | None = None,
    cache_path: Path | None = None,
) -> SignInSettings:
    """Read how to sign in to the Anvil server at `url` (its base URL or its `/mcp` URL).

    `client_id` and `cache_path` override the defaults (the Azure CLI's client id; the
    `ANVIL_TOKEN_CACHE` file or Anvil's config folder). Raises `ServerUnreachable`,
    `SignInNotNeeded` (sign-in off), `DevServer` (use `anvil token`) or `DiscoveryError`.
    """
    urls = metadata_urls(url)
    if http is None:
        with httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=True) as client:
            document_url, document = _fetch_metadata(client, urls, url)
    else:
        document_url, document = _fetch_metadata(http, urls, url)
    authority, scopes = _read_metadata(document, document_url, url)
    return SignInSettings(
        authority=authority,
        scopes=scopes,
        client_id=client_id or DEFAULT_CLIENT_ID,
        cache_path=cache_path or default_cache_path(),
        server_url=url,
    )


def _fetch_metadata(client: httpx.Client, urls: list[str], server: str) -> tuple[str, object]:
    for document_url in urls:
        try:
            response = client.get(document_url, headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise ServerUnreachable(f"cannot reach {server}: {_first_line(error)}") from None
        if response.status_code == 404:
            continue
        if response.status_code != 200:
            raise DiscoveryError(
                f"{document_url} answered HTTP {response.status_code}, not its sign-in settings"
            )
        try:
            return document_url, response.json()
        except ValueError:
            raise DiscoveryError(f"{document_url} is not a protected resource document (not JSON)") from None
    raise SignInNotNeeded(
        f"{server} publishes no sign-in settings, so it does not ask for sign-in: no sign-in is needed"
    )


def _read_metadata(document: object, document_url: str, server: str) -> tuple[str, tuple[str, ...]]:
    """The MSAL authority and the API scopes from an RFC 9728 document."""

    def malformed(why: str) -> DiscoveryError:
        return DiscoveryError(f"{document_url} is not a usable protected resource document: {why}")

    if not isinstance(document, dict):
        raise malformed("not a JSON object")
    servers = document.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
        raise malformed("it names no authorization server")
    parts = urlsplit(servers[0])
    if parts.hostname == _DEV_HOST:
        raise DevServer(
            f"{server} is a local dev server: its tokens come from `anvil token` "
            "(run with the server's data folder), not from Entra sign-in"
        )
    tenant_path = parts.path.rstrip("/").removesuffix("/v2.0").strip("/")
    if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment:
        raise malformed(f"its authorization server {servers[0]} is not an https URL")
    if not tenant_path or "/" in tenant_path:
        raise malformed(f"its authorization server {servers[0]} names no tenant")
    return f"https://{parts.netloc}/{tenant_path}", _api_scopes(document.get("scopes_supported"), malformed)


def _api_scopes(value: object, malformed: Callable[[str], DiscoveryError]) -> tuple[str, ...]:
    """The scopes of one API (`api://...`): a token is only ever requested for Anvil's own API,
    whatever else a document may list, so a server cannot have the user sign in to another."""
    if not isinstance(value, list) or not all(isinstance(scope, str) for scope in value):
        raise malformed("it has no scopes_supported list")
    scopes = tuple(scope for scope in value if scope not in _SIGN_IN_SCOPES)
    if not scopes:
        raise malformed("scopes_supported names no API scope")
    matches = [_API_SCOPE.fullmatch(scope) for scope in scopes]
    resources = {match.group(1) for match in matches if match}
    if None in matches or len(resources) != 1:
        raise malformed(f"its scopes {' '.join(scopes)} are not scopes of one api:// API")
    return scopes


# --- the token cache -----------------------------------------------------------------------------


def _open_cache(path: Path, *, encrypt: bool) -> tuple[Any, bool]:
    """MSAL's cache persisted at `path`, and whether it is encrypted."""
    try:
        # Owner-only whatever the umask; a cache left wider by an earlier version is narrowed.
        private_file(path, narrow=True)
    except OSError as error:
        raise SignInUnavailable(f"cannot create the token cache {path}: {_first_line(error)}") from None
    persistence: Any = None
    if encrypt:
        try:
            persistence = build_encrypted_persistence(str(path))
        except Exception as error:  # Any failure of the OS keyring means: no encryption here.
            logger.debug("token cache not encrypted (%s); using an owner-only file", type(error).__name__)
    if persistence is None:
        persistence = FilePersistence(str(path))
    return PersistedTokenCache(persistence), bool(persistence.is_encrypted)


# --- signing in ----------------------------------------------------------------------------------


class UserSignIn:
    """One user's sign-in to one authority, for one client, with tokens in a persistent cache.

    Creating it opens the cache and nothing else; the first call that needs the authority reads
    its OpenID configuration. Calls are serialised, so concurrent `token()` calls for a token
    about to expire make one refresh. `encrypted` tells whether the OS encrypts the cache (see
    the module doc).

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
        self._cache, self.encrypted = _open_cache(settings.cache_path, encrypt=encrypt)
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
            listener = _LoopbackListener(open_browser or open_in_web_browser, fallback)
        except OSError as error:
            raise SignInUnavailable(
                f"cannot listen on 127.0.0.1 for the browser's answer: {_first_line(error)}"
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
                raise SignInFailed(f"sign-in failed: {_first_line(error)}") from None
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
                f"cannot use the token cache {self.settings.cache_path}: {_first_line(error)}"
            ) from None
        except OSError as error:  # requests' errors are OSErrors
            raise SignInUnavailable(
                f"cannot reach the sign-in service {authority}: {_first_line(error)}"
            ) from None
        except ValueError as error:  # MSAL's word for an authority it cannot use
            raise SignInUnavailable(f"cannot sign in at {authority}: {_first_line(error)}") from None

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
                f"(delete it and sign in again): {_first_line(error)}"
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


# --- the browser --------------------------------------------------------------------------------


def browser_available() -> bool:
    """Whether a web browser the user can see can be opened here, for `login_in_browser`.

    The rule: Python's `webbrowser` module must know a browser (`webbrowser.get()` succeeds; it
    honours `$BROWSER`), and that browser must show on the user's screen. On Linux and the other
    Unix systems that means a graphical session: `DISPLAY` (X11, X forwarding over SSH included)
    or `WAYLAND_DISPLAY` is set; without either (a plain SSH session, a container, a server, WSL
    without WSLg) there is none, since a text-mode browser cannot sign in to Entra. On Windows
    and macOS the desktop has a browser, but not for an SSH session (`SSH_CONNECTION`,
    `SSH_CLIENT` or `SSH_TTY` set): it would open on the remote machine's desktop, if any.
    Where this says False, sign in with the device code flow (`UserSignIn.login`).
    """
    if sys.platform in ("win32", "darwin"):
        if any(os.environ.get(name) for name in SSH_VARIABLES):
            return False
    elif not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


def open_in_web_browser(url: str) -> None:
    """Open `url` in the user's web browser (the `webbrowser` module); raises `webbrowser.Error`
    when none could be opened."""
    if not webbrowser.open(url):
        raise webbrowser.Error("no web browser could be opened")


#: The largest form post the loopback listener reads (an authorization answer is a few KiB).
_MAX_ANSWER_BYTES = 64 * 1024
_PAGE = (
    "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>Anvil sign-in</title></head>"
    "<body><h1>{title}</h1><p>{text}</p></body></html>"
)


def _page(title: str, text: str) -> str:
    return _PAGE.format(title=html.escape(title), text=html.escape(text))


class _LoopbackListener:
    """Where the browser brings a sign-in's answer back: an HTTP listener on the loopback
    interface (127.0.0.1, a free port) for one sign-in, serving from threads of its own.

    MSAL's `acquire_token_interactive` drives it as its `auth_code_receiver`: MSAL builds the
    authorization request (PKCE, state, nonce, `response_mode=form_post`), hands its URL and
    state to `get_auth_response`, and redeems the code that comes back. The listener opens the
    browser once it is serving, takes the answer only as a form post carrying that state (a code
    never sits in an address, and a page of another site cannot feed it one), shows the user a
    page, and hands MSAL the answer's fields. Leaving the `with` block stops it and every
    connection it holds, and joins its threads.
    """

    def __init__(self, open_browser: Callable[[str], None], fallback: str) -> None:
        self._open_browser = open_browser
        self._fallback = fallback
        self._lock = threading.Lock()
        self._state: str | None = None
        self._answer: dict[str, str] | None = None
        self._answered = threading.Event()
        self._server = _ListenerServer(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="anvil-sign-in-listener"
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def __enter__(self) -> _LoopbackListener:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._thread.join()
        self._server.close_connections()
        self._server.server_close()

    def get_auth_response(
        self, *, auth_uri: str, state: str | None = None, timeout: float | None = None, **_: object
    ) -> dict[str, str] | None:
        """Open the browser at `auth_uri` and wait for the answer carrying `state`: its fields,
        or None when none came within `timeout` seconds (MSAL then raises its timeout error)."""
        with self._lock:
            self._state = state
        try:
            self._open_browser(auth_uri)
        except (webbrowser.Error, OSError) as error:
            raise SignInUnavailable(
                f"cannot open a web browser here ({_first_line(error)}): sign in with `{self._fallback}`"
            ) from None
        self._answered.wait(timeout)
        with self._lock:
            return None if self._answer is None else dict(self._answer)

    def check(self, fields: Mapping[str, str]) -> tuple[int, str, bool]:
        """The status and page for a posted answer, and whether it is this sign-in's answer."""
        if "code" not in fields and "error" not in fields:
            return 400, _page("Not a sign-in answer", "This page only takes a sign-in's answer."), False
        with self._lock:
            expected = self._state
        if expected is None or not hmac.compare_digest(fields.get("state", "").encode(), expected.encode()):
            text = "This answer belongs to another sign-in; Anvil is still waiting for its own."
            return 400, _page("Not this sign-in's answer", text), False
        if "code" in fields:
            text = "You are signed in to Anvil. You can close this tab and go back to the terminal."
            return 200, _page("Signed in", text), True
        reason = _first_line(fields.get("error_description") or fields.get("error") or "no reason given")
        return 200, _page("Sign-in failed", f"{fields.get('error')}: {reason}"), True

    def accept(self, fields: Mapping[str, str]) -> None:
        """Keep this sign-in's answer (the first one; its page is already on its way)."""
        with self._lock:
            if self._answer is None:
                self._answer = dict(fields)
        self._answered.set()


class _ListenerServer(HTTPServer):
    """The listener's HTTP server: a thread per connection, each tracked, so that stopping ends
    idle connections a browser opened ahead (instead of waiting for them) and joins them all."""

    #: A free port of its own, never one another socket holds (Windows would allow that).
    allow_reuse_address = False

    def __init__(self, listener: _LoopbackListener) -> None:
        super().__init__(("127.0.0.1", 0), _ListenerHandler)
        self.listener = listener
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection, args=(request, client_address), name="anvil-sign-in-connection"
        )
        with self._connections_lock:
            self._connections[request] = thread
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception as error:  # A browser that went away: nothing to tell anyone.
            logger.debug("sign-in listener connection failed: %s", type(error).__name__)
        finally:
            with self._connections_lock:
                self._connections.pop(request, None)
            self.shutdown_request(request)

    def close_connections(self) -> None:
        """End every connection still open (the server has stopped accepting) and join them."""
        with self._connections_lock:
            connections = list(self._connections.items())
        for connection, _ in connections:
            with contextlib.suppress(OSError):  # already closed by its thread
                connection.shutdown(socket.SHUT_RDWR)
        for _, thread in connections:
            thread.join()


class _ListenerHandler(BaseHTTPRequestHandler):
    server: _ListenerServer
    #: Seconds a connection may stay silent.
    timeout = 30

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= _MAX_ANSWER_BYTES:
            self._send(400, _page("Not a sign-in answer", "The request is not a sign-in's answer."))
            return
        body = self.rfile.read(length).decode("utf-8", errors="replace")
        fields = {name: values[0] for name, values in parse_qs(body, keep_blank_values=True).items()}
        status, page, accepted = self.server.listener.check(fields)
        self._send(status, page)
        if accepted:
            self.server.listener.accept(fields)

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        if "code" in query or "error" in query:
            text = "Anvil takes a sign-in's answer as a form post only, never in the address."
            self._send(400, _page("Not accepted", text))
        else:
            self._send(404, _page("Nothing here", "This address only takes a sign-in's answer."))

    def _send(self, status: int, page: str) -> None:
        body = page.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", "default-src 'none'")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: requests carry authorization codes, which are never logged."""


def _unverified_claims(token: str) -> dict[str, Any]:
    """The claims of a cached id token, for display only (it came straight from the authority)."""
    try:
        return dict(jwt.decode(token, options={"verify_signature": False}))
    except jwt.PyJWTError:
        return {}


def _first_line(value: object) -> str:
    """The first non-empty line of a message (Entra appends trace ids on further lines)."""
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    text = lines[0] if lines else type(value).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _describe_error(result: Mapping[str, Any]) -> str:
    """An OAuth error answer in a few words: its description's first line, else its code."""
    description = result.get("error_description")
    if description:
        return _first_line(description)
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
