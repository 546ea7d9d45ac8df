"""Where a user signs in to a remote Anvil, and for what: its RFC 9728 document.

`discover(url)` reads the server's protected resource document and says where to sign in (the
tenant's authority) and for what (the API's scopes), or that the server asks for no sign-in, or
that it is a local dev server (whose tokens come from its dev key, not from Entra).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from app.client.errors import DevServer, DiscoveryError, ServerUnreachable, SignInNotNeeded, first_line
from app.devkey import DEV_AUTHORITY
from app.urls import checked_url

#: The Azure CLI's public client id: Anvil's deployment pre-authorises it on the API app, so
#: users sign in without registering a client of their own (azure-identity's default too).
DEFAULT_CLIENT_ID = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
METADATA_PATH = "/.well-known/oauth-protected-resource"
#: Seconds for any one request to the server or to the sign-in service.
HTTP_TIMEOUT = 10.0

#: Scopes MSAL adds to every sign-in by itself (and refuses to be given).
_SIGN_IN_SCOPES = frozenset({"openid", "profile", "offline_access"})
_API_SCOPE = re.compile(r"(api://\S+)/([^/\s]+)")
_DEV_HOST = urlsplit(DEV_AUTHORITY).hostname


def _default_cache_path() -> Path:
    # `token_cache` brings MSAL (about a third of a second to import): only sign-in needs it, not
    # an `anvil ask` that finds a server without sign-in or a dev server.
    from app.client.token_cache import default_cache_path

    return default_cache_path()


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
    cache_path: Path = field(default_factory=_default_cache_path)
    server_url: str | None = None


def metadata_urls(url: str) -> list[str]:
    """Where the RFC 9728 document of the server at `url` may be, in the order to try.

    Path-aware first (RFC 9728 §3.1: the well-known prefix goes before the resource's path;
    a bare server URL means its `/mcp` endpoint), then the document at the root.
    """
    try:
        checked_url(url, bare=False)
    except ValueError:
        raise DiscoveryError(f"{url} is not an http(s) URL of an Anvil server") from None
    parts = urlsplit(url)
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
        cache_path=cache_path or _default_cache_path(),
        server_url=url,
    )


def _fetch_metadata(client: httpx.Client, urls: list[str], server: str) -> tuple[str, object]:
    for document_url in urls:
        try:
            response = client.get(document_url, headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise ServerUnreachable(f"cannot reach {server}: {first_line(error)}") from None
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
