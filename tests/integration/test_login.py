"""Signing a user in with real MSAL against the local Entra stand-in, and discovering where to.

The issuer serves TLS (MSAL talks to https authorities only); MSAL's HTTP session trusts the
issuer's throwaway CA and ignores the environment's CA settings. Tests play the user by
approving the device code the prompt shows, or play the user's web browser: it opens the
issuer's sign-in page and takes the answer back to the sign-in's loopback listener. Every cache
lives under the test's own folder; no real browser is ever opened.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import ssl
import stat
import sys
import threading
import webbrowser
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
import requests
from security.calls import CLIENT_ID, SCOPE, TENANT, ask_mcp, entra_env, new_id, tool_result
from support.anvil_server import AnvilServer, free_port, run_anvil
from support.entra_issuer import LOCAL_USER_OID, EntraIssuer, pkce_challenge, running_issuer

from app.client import login
from app.client.login import (
    DEFAULT_CLIENT_ID,
    Account,
    DevServer,
    DiscoveryError,
    ServerUnreachable,
    SignInFailed,
    SignInNotNeeded,
    SignInRequired,
    SignInSettings,
    SignInUnavailable,
    UserSignIn,
    browser_available,
    default_cache_path,
    discover,
    metadata_urls,
)

API_SCOPE = f"api://{CLIENT_ID}/{SCOPE}"
SERVER_URL = "https://anvil.example.com/mcp"
USER = "ada@contoso.example"
USER_CODE = re.compile(r"enter the code (\S+) to authenticate")


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a test does, defaults resolve under its own folder, never the real user's."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("APPDATA", str(tmp_path / "appdata"))
    monkeypatch.delenv(login.TOKEN_CACHE_VARIABLE, raising=False)


def stopped_for_good(issuer: EntraIssuer) -> None:
    name = f"entra-issuer-{issuer.port}"
    issuer.stop()
    assert not [thread for thread in threading.enumerate() if thread.name == name]


@pytest.fixture
def issuer() -> Iterator[EntraIssuer]:
    """A fresh TLS issuer per test, so its counters count that test's requests only."""
    running = EntraIssuer(client_id=CLIENT_ID, tls=True)
    running.start()
    try:
        yield running
    finally:
        stopped_for_good(running)


def msal_session(issuer: EntraIssuer) -> requests.Session:
    """MSAL's HTTP client trusting the issuer's CA (and not a CA bundle named by the environment,
    which requests would otherwise prefer)."""
    session = requests.Session()
    session.trust_env = False
    session.verify = str(issuer.ca_file)
    return session


@pytest.fixture
def http(issuer: EntraIssuer) -> Iterator[requests.Session]:
    with msal_session(issuer) as session:
        yield session


@pytest.fixture
def cache_path(tmp_path: Path) -> Path:
    """A cache file in folders that do not exist yet."""
    return tmp_path / "config" / "anvil" / "token-cache.bin"


def settings_for(issuer: EntraIssuer, cache_path: Path) -> SignInSettings:
    return SignInSettings(
        authority=f"{issuer.authority}/{TENANT}",
        scopes=(API_SCOPE,),
        cache_path=cache_path,
        server_url=SERVER_URL,
    )


def user_code(message: str) -> str:
    match = USER_CODE.search(message)
    assert match, message
    return match.group(1)


def approve_at_once(issuer: EntraIssuer, **user: str) -> Callable[[str], None]:
    """A prompt whose user signs in before the client first asks."""

    def prompt(message: str) -> None:
        issuer.approve(user_code(message), **user)

    return prompt


class ApproverElsewhere:
    """A prompt whose user signs in from another thread once the client is already polling (the
    way a person at a browser does); `join()` reaps that thread and re-raises its failure."""

    def __init__(self, issuer: EntraIssuer, **user: str) -> None:
        self._issuer, self._user = issuer, user
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self.messages: list[str] = []

    def __call__(self, message: str) -> None:
        self.messages.append(message)
        self._thread = threading.Thread(target=self._sign_in, args=(user_code(message),))
        self._thread.start()

    def _sign_in(self, code: str) -> None:
        try:
            self._issuer.wait_for_poll(code)
            self._issuer.approve(code, **self._user)
        except BaseException as failure:
            self._failure = failure
            self._issuer.decline(code)  # ends the client's polling, so the test fails promptly

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=30)
            assert not self._thread.is_alive()
        if self._failure is not None:
            raise self._failure


def signed_in(issuer: EntraIssuer, http: requests.Session, cache_path: Path, **user: str) -> UserSignIn:
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    signin.login(prompt=approve_at_once(issuer, **user))
    return signin


def claims(token: str, issuer: EntraIssuer) -> dict[str, object]:
    """The claims of an access token, verified as Anvil verifies them (key, issuer, audience)."""
    return dict(
        jwt.decode(
            token,
            issuer.key.public_pem,
            algorithms=["RS256"],
            audience=CLIENT_ID,
            issuer=issuer.v2_issuer(TENANT),
        )
    )


def cached_items(cache_path: Path, kind: str) -> list[dict[str, object]]:
    """The entries of one kind (`RefreshToken`, `Account`, ...) in a plain cache file."""
    text = cache_path.read_text()
    return list(json.loads(text).get(kind, {}).values()) if text else []


# --- discovery -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def entra_issuer() -> Iterator[EntraIssuer]:
    with running_issuer(CLIENT_ID, tls=True) as running:
        yield running


@pytest.fixture(scope="module")
def entra_server(
    entra_issuer: EntraIssuer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AnvilServer]:
    """`anvil serve` in Entra mode against the TLS issuer (trusting its CA for the key set)."""
    env = entra_env(entra_issuer, SSL_CERT_FILE=str(entra_issuer.ca_file))
    with run_anvil(tmp_path_factory.mktemp("entra-login"), env) as running:
        yield running


def test_discovery_reads_an_entra_server_at_its_mcp_url_or_base_url(
    entra_server: AnvilServer, entra_issuer: EntraIssuer, tmp_path: Path
) -> None:
    from_mcp_url = discover(entra_server.mcp_url)
    from_base_url = discover(entra_server.url, cache_path=tmp_path / "cache.bin", client_id="my-client")

    assert from_mcp_url.authority == f"{entra_issuer.authority}/{TENANT}"
    assert from_mcp_url.scopes == (API_SCOPE,)
    assert from_mcp_url.client_id == DEFAULT_CLIENT_ID == "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
    assert from_mcp_url.cache_path == tmp_path / "xdg" / "anvil" / "token-cache.bin"
    assert from_mcp_url.server_url == entra_server.mcp_url
    assert (from_base_url.authority, from_base_url.scopes) == (from_mcp_url.authority, from_mcp_url.scopes)
    assert (from_base_url.client_id, from_base_url.cache_path) == ("my-client", tmp_path / "cache.bin")


def test_device_code_sign_in_gives_a_token_the_server_accepts(
    entra_server: AnvilServer, entra_issuer: EntraIssuer, cache_path: Path
) -> None:
    settings = discover(entra_server.mcp_url, cache_path=cache_path)
    oid = new_id("")
    flows, polls = entra_issuer.device_flows_started, entra_issuer.device_code_polls
    approver = ApproverElsewhere(entra_issuer, oid=oid, username=USER)
    with msal_session(entra_issuer) as http:
        signin = UserSignIn(settings, http_client=http, encrypt=False)
        try:
            account = signin.login(prompt=approver)
        finally:
            approver.join()
        token = signin.token()

    assert account == Account(username=USER, oid=oid, tenant_id=TENANT)
    assert len(approver.messages) == 1
    assert approver.messages[0].startswith(
        f"To sign in, use a web browser to open the page {entra_issuer.authority}"
    )
    # One flow; polled while pending, then once more after the user signed in.
    assert (entra_issuer.device_flows_started - flows, entra_issuer.device_code_polls - polls) == (1, 2)
    token_claims = claims(token, entra_issuer)
    assert (token_claims["oid"], token_claims["scp"], token_claims["azp"]) == (oid, SCOPE, DEFAULT_CLIENT_ID)
    # The server takes the token as this user's: the conversation continues across two asks.
    conversation = new_id("login")
    tool_result(ask_mcp(entra_server, token, "first", conversation))
    second = tool_result(ask_mcp(entra_server, token, "second", conversation))["structuredContent"]
    assert (second["turn"], second["created"]) == (2, False)


def served(documents: dict[str, httpx.Response]) -> tuple[httpx.Client, list[str]]:
    """An HTTP client for `discover` answering from `documents` by URL (404 otherwise), and the
    list of URLs it was asked for."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return documents.get(str(request.url), httpx.Response(404))

    return httpx.Client(transport=httpx.MockTransport(answer)), asked


ENTRA_DOCUMENT = {
    "resource": "https://anvil.contoso.example/mcp",
    "authorization_servers": [f"https://login.microsoftonline.com/{TENANT}/v2.0"],
    "scopes_supported": [API_SCOPE],
    "bearer_methods_supported": ["header"],
}


def test_discovery_reads_a_plain_document_at_the_path_aware_address_first() -> None:
    url = "https://anvil.contoso.example/mcp"
    client, asked = served(
        {
            "https://anvil.contoso.example/.well-known/oauth-protected-resource/mcp": httpx.Response(
                200, json=ENTRA_DOCUMENT
            )
        }
    )
    with client:
        settings = discover(url, http=client)

    assert settings.authority == f"https://login.microsoftonline.com/{TENANT}"
    assert settings.scopes == (API_SCOPE,)
    assert asked == ["https://anvil.contoso.example/.well-known/oauth-protected-resource/mcp"]


def test_discovery_falls_back_to_the_document_at_the_root() -> None:
    document = {**ENTRA_DOCUMENT, "scopes_supported": ["openid", API_SCOPE, "offline_access"]}
    client, asked = served(
        {
            "https://anvil.contoso.example/.well-known/oauth-protected-resource": httpx.Response(
                200, json=document
            )
        }
    )
    with client:
        settings = discover("https://anvil.contoso.example/gateway/mcp/", http=client)

    assert settings.scopes == (API_SCOPE,)
    assert asked == [
        "https://anvil.contoso.example/.well-known/oauth-protected-resource/gateway/mcp",
        "https://anvil.contoso.example/.well-known/oauth-protected-resource",
    ]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://host", "https://host/.well-known/oauth-protected-resource/mcp"),
        ("https://host/", "https://host/.well-known/oauth-protected-resource/mcp"),
        ("https://host:8443/mcp", "https://host:8443/.well-known/oauth-protected-resource/mcp"),
        (
            "http://127.0.0.1:8000/api/mcp",
            "http://127.0.0.1:8000/.well-known/oauth-protected-resource/api/mcp",
        ),
    ],
)
def test_metadata_addresses_are_path_aware(url: str, expected: str) -> None:
    assert metadata_urls(url)[0] == expected
    assert (
        metadata_urls(url)[1] == expected.split("/.well-known/")[0] + "/.well-known/oauth-protected-resource"
    )


def test_discovery_without_a_server_says_it_cannot_reach_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(ServerUnreachable) as raised:
        discover(url)
    assert str(raised.value).startswith(f"cannot reach {url}: ")
    assert "\n" not in str(raised.value)


def test_discovery_of_a_dev_server_points_at_anvil_token(dev_server: AnvilServer) -> None:
    with pytest.raises(DevServer) as raised:
        discover(dev_server.mcp_url)
    assert str(raised.value) == (
        f"{dev_server.mcp_url} is a local dev server: its tokens come from `anvil token` "
        "(run with the server's data folder), not from Entra sign-in"
    )


def test_discovery_of_a_server_without_sign_in_says_none_is_needed(anon_server: AnvilServer) -> None:
    with pytest.raises(SignInNotNeeded) as raised:
        discover(anon_server.url)
    assert str(raised.value).endswith("does not ask for sign-in: no sign-in is needed")
    assert str(raised.value).startswith(anon_server.url)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (httpx.Response(200, text="<html>"), "is not a protected resource document (not JSON)"),
        (httpx.Response(200, json=["x"]), "not a JSON object"),
        (httpx.Response(500, text="oops"), "answered HTTP 500"),
        (
            httpx.Response(200, json={**ENTRA_DOCUMENT, "authorization_servers": []}),
            "names no authorization server",
        ),
        (
            httpx.Response(
                200, json={**ENTRA_DOCUMENT, "authorization_servers": [f"http://127.0.0.1:1/{TENANT}/v2.0"]}
            ),
            "is not an https URL",
        ),
        (
            httpx.Response(200, json={**ENTRA_DOCUMENT, "authorization_servers": ["https://login.example/"]}),
            "names no tenant",
        ),
        (httpx.Response(200, json={**ENTRA_DOCUMENT, "scopes_supported": None}), "has no scopes_supported"),
        (httpx.Response(200, json={**ENTRA_DOCUMENT, "scopes_supported": ["openid"]}), "names no API scope"),
        (
            # Another API's token must never be what the user signs in for.
            httpx.Response(
                200, json={**ENTRA_DOCUMENT, "scopes_supported": ["https://graph.microsoft.com/.default"]}
            ),
            "are not scopes of one api:// API",
        ),
    ],
)
def test_discovery_refuses_an_unusable_document_in_one_line(answer: httpx.Response, message: str) -> None:
    document_url = "https://anvil.contoso.example/.well-known/oauth-protected-resource/mcp"
    client, _ = served({document_url: answer})
    with client, pytest.raises(DiscoveryError) as raised:
        discover("https://anvil.contoso.example/mcp", http=client)
    assert type(raised.value) is DiscoveryError
    assert str(raised.value).startswith(document_url)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


# --- the cache -----------------------------------------------------------------------------------


def test_the_cache_is_an_owner_only_file_in_owner_only_folders_whatever_the_umask(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    previous = os.umask(0)
    try:
        signin = signed_in(issuer, http, cache_path)
    finally:
        os.umask(previous)

    assert signin.encrypted is False
    assert stat.S_IMODE(cache_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache_path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache_path.parent.parent.stat().st_mode) == 0o700
    assert len(cached_items(cache_path, "RefreshToken")) == 1


def test_an_existing_cache_file_is_narrowed_to_the_owner(tmp_path: Path, issuer: EntraIssuer) -> None:
    cache_path = tmp_path / "token-cache.bin"
    cache_path.write_text("")
    cache_path.chmod(0o644)
    UserSignIn(settings_for(issuer, cache_path), encrypt=False)
    assert stat.S_IMODE(cache_path.stat().st_mode) == 0o600


def test_without_os_encryption_the_cache_falls_back_to_an_owner_only_file(
    issuer: EntraIssuer, cache_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_keyring(location: str) -> object:
        raise RuntimeError("libsecret did not perform properly (no D-Bus session)")

    monkeypatch.setattr(login, "build_encrypted_persistence", no_keyring)
    signin = UserSignIn(settings_for(issuer, cache_path))
    assert signin.encrypted is False
    assert stat.S_IMODE(cache_path.stat().st_mode) == 0o600


def test_the_cache_file_can_be_named_by_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_cache_path() == tmp_path / "xdg" / "anvil" / "token-cache.bin"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert default_cache_path() == tmp_path / "home" / ".config" / "anvil" / "token-cache.bin"
    monkeypatch.setenv("ANVIL_TOKEN_CACHE", str(tmp_path / "elsewhere.bin"))
    assert default_cache_path() == tmp_path / "elsewhere.bin"
    assert SignInSettings(authority="https://login.example/t", scopes=(API_SCOPE,)).cache_path == (
        tmp_path / "elsewhere.bin"
    )


# --- tokens --------------------------------------------------------------------------------------


def test_a_second_instance_on_the_same_cache_gets_the_token_silently(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    first = signed_in(issuer, http, cache_path).token()

    again = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    assert again.token() == first
    assert (issuer.device_flows_started, issuer.refreshes) == (1, 0)


def test_force_refresh_makes_exactly_one_refresh_and_keeps_the_rotated_refresh_token(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = signed_in(issuer, http, cache_path)
    before = signin.token()

    refreshed = signin.token(force_refresh=True)
    assert issuer.refreshes == 1
    assert refreshed != before
    assert signin.token() == refreshed
    assert issuer.refreshes == 1
    # The issuer spent the old refresh token: a second refresh works only with its successor,
    # and another process reading the cache has that successor too.
    other = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    assert other.token(force_refresh=True) not in (before, refreshed)
    assert issuer.refreshes == 2


def test_a_token_near_expiry_is_refreshed_silently(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    issuer.access_token_lifetime = 120  # MSAL renews tokens with less than five minutes left
    signin = signed_in(issuer, http, cache_path)
    issuer.access_token_lifetime = 3600
    assert issuer.refreshes == 0

    renewed = signin.token()
    assert issuer.refreshes == 1
    renewed_claims = claims(renewed, issuer)
    assert int(str(renewed_claims["exp"])) - int(str(renewed_claims["iat"])) == 3600
    assert signin.token() == renewed
    assert (issuer.refreshes, issuer.device_flows_started) == (1, 1)


def test_concurrent_calls_for_an_expiring_token_share_one_refresh(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    issuer.access_token_lifetime = 120
    signin = signed_in(issuer, http, cache_path)
    issuer.access_token_lifetime = 3600
    tokens: list[str] = []
    start = threading.Barrier(4)

    def ask() -> None:
        start.wait(timeout=10)
        tokens.append(signin.token())

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()

    assert len(tokens) == 4
    assert len(set(tokens)) == 1
    assert issuer.refreshes == 1


def test_a_revoked_refresh_token_asks_the_user_to_sign_in_again(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = signed_in(issuer, http, cache_path)
    assert issuer.revoke_refresh_tokens() == 1

    with pytest.raises(SignInRequired) as raised:
        signin.token(force_refresh=True)
    message = str(raised.value)
    assert message.startswith(f"sign-in to {SERVER_URL} has to be renewed (AADSTS50173: ")
    assert message.endswith(f": run `anvil login --url {SERVER_URL}`")
    assert "\n" not in message
    assert issuer.refreshes == 1


def test_nobody_signed_in_asks_for_anvil_login_without_calling_the_authority(
    issuer: EntraIssuer, cache_path: Path
) -> None:
    stopped_for_good(issuer)
    signin = UserSignIn(settings_for(issuer, cache_path), encrypt=False)
    with pytest.raises(SignInRequired) as raised:
        signin.token()
    assert str(raised.value) == f"not signed in to {SERVER_URL}: run `anvil login --url {SERVER_URL}`"
    assert signin.who() is None


def test_an_unreachable_authority_is_one_line(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    stopped_for_good(issuer)
    with pytest.raises(SignInUnavailable) as raised:
        UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False).login(prompt=print)
    assert str(raised.value).startswith(f"cannot reach the sign-in service {issuer.authority}/{TENANT}: ")
    assert "\n" not in str(raised.value)


# --- who, logout, another user -------------------------------------------------------------------


def test_who_reports_the_signed_in_user_from_the_cache(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    oid = new_id("")
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    assert signin.who() is None
    account = signin.login(prompt=approve_at_once(issuer, oid=oid, username=USER))
    stopped_for_good(issuer)  # who() reads the cache only

    assert account == Account(username=USER, oid=oid, tenant_id=TENANT)
    assert signin.who() == account
    assert UserSignIn(settings_for(issuer, cache_path), encrypt=False).who() == account


def test_logout_forgets_the_user_even_offline(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signed_in(issuer, http, cache_path, username=USER)
    stopped_for_good(issuer)

    assert UserSignIn(settings_for(issuer, cache_path), encrypt=False).logout() == [USER]

    fresh = UserSignIn(settings_for(issuer, cache_path), encrypt=False)
    assert fresh.who() is None
    with pytest.raises(SignInRequired, match=r"^not signed in to .*: run `anvil login --url "):
        fresh.token()
    for kind in ("RefreshToken", "AccessToken", "IdToken", "Account"):
        assert cached_items(cache_path, kind) == [], kind
    assert fresh.logout() == []


def test_signing_in_as_another_user_replaces_the_first(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = signed_in(issuer, http, cache_path, oid=new_id(""), username="first@contoso.example")
    bob = signin.login(prompt=approve_at_once(issuer, oid=new_id(""), username="bob@contoso.example"))

    assert signin.who() == bob
    assert claims(signin.token(), issuer)["oid"] == bob.oid
    assert [item["username"] for item in cached_items(cache_path, "Account")] == ["bob@contoso.example"]
    assert len(cached_items(cache_path, "RefreshToken")) == 1


def test_a_declined_sign_in_fails_in_one_line_and_signs_nobody_in(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    with pytest.raises(SignInFailed, match=r"^sign-in was declined$"):
        signin.login(prompt=lambda message: issuer.decline(user_code(message)))
    assert signin.who() is None


# --- signing in in a browser ---------------------------------------------------------------------


class _Form(HTMLParser):
    """The first form of a page: where it posts, and its fields."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "form" and self.action is None:
            self.action = attributes.get("action", "")
        elif tag == "input" and attributes.get("name"):
            self.fields[attributes["name"]] = attributes.get("value", "")


def browser_client(issuer: EntraIssuer) -> httpx.Client:
    """An HTTP client for the browser: trusts the issuer's CA, ignores proxies and the environment."""
    context = ssl.create_default_context(cafile=str(issuer.ca_file))
    return httpx.Client(verify=context, trust_env=False, timeout=10)


def listener_url(authorization_url: str) -> str:
    """Where a sign-in's answer goes: the redirect URI of its authorization request."""
    return parse_qs(urlsplit(authorization_url).query)["redirect_uri"][0]


class Browser:
    """Plays the user's web browser: `open_browser` for `login_in_browser`.

    It opens the sign-in page (the issuer's authorization endpoint, where the user signs in at
    once) and goes where that page sends it: a redirect is followed, a form that posts itself
    (Entra's `form_post` answer) is posted, as a browser running its script does. `visits` are
    the URLs it was opened at, `answers` the pages the sign-in's listener answered with.
    """

    def __init__(self, issuer: EntraIssuer) -> None:
        self._issuer = issuer
        self.visits: list[str] = []
        self.answers: list[httpx.Response] = []

    def __call__(self, url: str) -> None:
        self.visits.append(url)
        with browser_client(self._issuer) as client:
            sign_in_page = client.get(url)
            if sign_in_page.status_code == 302:
                answer = client.get(sign_in_page.headers["Location"])
            else:
                assert sign_in_page.status_code == 200, sign_in_page.text
                form = _Form()
                form.feed(sign_in_page.text)
                assert form.action, sign_in_page.text
                answer = client.post(form.action, data=form.fields)
        self.answers.append(answer)


def test_browser_sign_in_gives_the_user_a_token_for_the_api_cached_for_the_next_run(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    oid = new_id("")
    issuer.sign_in_as(oid=oid, username=USER)
    browser = Browser(issuer)
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)

    account = signin.login_in_browser(open_browser=browser, timeout=10)

    assert account == Account(username=USER, oid=oid, tenant_id=TENANT)
    assert signin.who() == account
    # The browser was opened once, at the issuer's authorization endpoint, with the request a
    # public client makes: a code, PKCE S256, a state, the account picker, and the answer to be
    # posted to a loopback redirect URI.
    assert len(browser.visits) == 1
    assert browser.visits[0].startswith(f"{issuer.authority}/{TENANT}/oauth2/v2.0/authorize?")
    request = issuer.last_authorization_request
    assert request is not None
    assert (request["client_id"], request["response_type"]) == (DEFAULT_CLIENT_ID, "code")
    assert (request["code_challenge_method"], request["prompt"]) == ("S256", "select_account")
    assert request["response_mode"] == "form_post"
    assert request["state"] and request["nonce"]
    assert re.fullmatch(r"http://localhost:\d+", request["redirect_uri"])
    assert set(request["scope"].split()) == {API_SCOPE, "openid", "profile", "offline_access"}
    # The listener took the answer and told the user so.
    [page] = browser.answers
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "You are signed in to Anvil" in page.text
    # ... then stopped: nothing listens there any more, and its threads are gone.
    with httpx.Client(trust_env=False) as client, pytest.raises(httpx.ConnectError):
        client.post(request["redirect_uri"].replace("localhost", "127.0.0.1"), data={"code": "x"})
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("anvil-sign-in")]
    # One code, redeemed once, for a token of the API for this user.
    assert (issuer.authorization_requests, issuer.authorization_code_redemptions) == (1, 1)
    token = signin.token()
    token_claims = claims(token, issuer)
    assert (token_claims["oid"], token_claims["scp"], token_claims["azp"]) == (oid, SCOPE, DEFAULT_CLIENT_ID)
    assert stat.S_IMODE(cache_path.stat().st_mode) == 0o600
    assert len(cached_items(cache_path, "RefreshToken")) == 1
    # The next run (another instance on the same cache) gets the token without asking anyone.
    again = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    assert again.who() == account
    assert again.token() == token
    assert (issuer.authorization_requests, issuer.authorization_code_redemptions, issuer.refreshes) == (
        1,
        1,
        0,
    )
    # ... and renews it with the refresh token the browser sign-in left.
    renewed = again.token(force_refresh=True)
    assert claims(renewed, issuer)["oid"] == oid
    assert renewed != token
    assert issuer.refreshes == 1


def test_browser_sign_in_replaces_an_account_signed_in_with_a_device_code(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = signed_in(issuer, http, cache_path, oid=new_id(""), username="first@contoso.example")
    bob = new_id("")
    issuer.sign_in_as(oid=bob, username="bob@contoso.example")

    account = signin.login_in_browser(open_browser=Browser(issuer), timeout=10)

    assert account == Account(username="bob@contoso.example", oid=bob, tenant_id=TENANT)
    assert claims(signin.token(), issuer)["oid"] == bob
    assert [item["username"] for item in cached_items(cache_path, "Account")] == ["bob@contoso.example"]
    assert len(cached_items(cache_path, "RefreshToken")) == 1


def test_a_sign_in_cancelled_in_the_browser_fails_in_one_line_and_signs_nobody_in(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    issuer.refuse_next_sign_in()
    browser = Browser(issuer)
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)

    with pytest.raises(SignInFailed, match=r"^sign-in was declined in the browser$"):
        signin.login_in_browser(open_browser=browser, timeout=10)

    [page] = browser.answers
    assert page.status_code == 200
    assert "Sign-in failed" in page.text
    assert "access_denied: AADSTS65004: User declined to consent" in page.text
    assert signin.who() is None
    assert (issuer.authorization_requests, issuer.authorization_code_redemptions) == (1, 0)
    # Only that sign-in was refused: the next one works.
    assert signin.login_in_browser(open_browser=Browser(issuer), timeout=10).oid == LOCAL_USER_OID


def test_a_sign_in_not_finished_in_the_browser_in_time_fails_in_one_line(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    opened: list[str] = []  # The user closes the tab: the browser never comes back.
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)

    with pytest.raises(SignInFailed) as raised:
        signin.login_in_browser(open_browser=opened.append, timeout=0.2)

    assert str(raised.value) == "sign-in was not completed in the browser within 0.2 seconds: sign in again"
    assert len(opened) == 1
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("anvil-sign-in")]
    assert signin.who() is None
    assert issuer.authorization_code_redemptions == 0


def test_the_listener_takes_only_its_own_sign_ins_answer_by_form_post(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    """Another page posting a code (wrong state), or a code in the address, is refused; the
    sign-in keeps waiting for its own answer. A connection a browser opened ahead and never used
    does not outlive the sign-in."""
    refusals: list[httpx.Response] = []
    idle: list[socket.socket] = []
    browser = Browser(issuer)

    def meddled_with(url: str) -> None:
        listener, state = listener_url(url), parse_qs(urlsplit(url).query)["state"][0]
        idle.append(socket.create_connection(("127.0.0.1", int(urlsplit(listener).port or 0)), timeout=10))
        with httpx.Client(trust_env=False, timeout=10) as client:
            refusals.append(client.post(listener, data={"code": "forged", "state": "another"}))
            refusals.append(client.post(listener, data={"code": "forged"}))
            refusals.append(client.get(listener, params={"code": "forged", "state": state}))
            refusals.append(client.post(listener, data={"state": state}))
        browser(url)

    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    try:
        account = signin.login_in_browser(open_browser=meddled_with, timeout=10)
        [connection] = idle
        assert connection.recv(1) == b""  # the listener hung up on it when it stopped
    finally:
        for connection in idle:
            connection.close()

    assert not [thread for thread in threading.enumerate() if thread.name.startswith("anvil-sign-in")]
    assert account.oid == LOCAL_USER_OID
    assert [answer.status_code for answer in refusals] == [400, 400, 400, 400]
    assert "belongs to another sign-in" in refusals[0].text
    assert "form post only" in refusals[2].text
    assert browser.answers[0].status_code == 200
    # Only the real code reached the token endpoint.
    assert issuer.authorization_code_redemptions == 1


def test_without_a_browser_the_sign_in_points_at_the_device_code(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def no_browser(url: str, new: int = 0, autoraise: bool = True) -> bool:
        opened.append(url)
        return False

    monkeypatch.setattr(webbrowser, "open", no_browser)
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)

    with pytest.raises(SignInUnavailable) as raised:
        signin.login_in_browser(timeout=10)  # the default: the webbrowser module

    assert str(raised.value) == (
        "cannot open a web browser here (no web browser could be opened): "
        f"sign in with `anvil login --url {SERVER_URL} --device-code`"
    )
    assert len(opened) == 1
    assert opened[0].startswith(f"{issuer.authority}/{TENANT}/oauth2/v2.0/authorize?")
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("anvil-sign-in")]


# --- the issuer's authorization code grant ---------------------------------------------------------


def authorization_code(client: httpx.Client, issuer: EntraIssuer, challenge: str, redirect_uri: str) -> str:
    """A code from the issuer's authorization endpoint (a query-mode answer: a 302)."""
    answer = client.get(
        f"{issuer.authority}/{TENANT}/oauth2/v2.0/authorize",
        params={
            "client_id": DEFAULT_CLIENT_ID,
            "response_type": "code",
            "redirect_uri": redirect_uri,
            "scope": f"{API_SCOPE} openid offline_access",
            "state": "s-1",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        },
    )
    assert answer.status_code == 302, answer.text
    location = urlsplit(answer.headers["Location"])
    assert f"{location.scheme}://{location.netloc}" == redirect_uri
    fields = parse_qs(location.query)
    assert fields["state"] == ["s-1"]
    return fields["code"][0]


def test_the_issuer_redeems_a_code_once_for_its_client_redirect_uri_and_pkce_verifier(
    issuer: EntraIssuer,
) -> None:
    verifier = secrets.token_urlsafe(48)
    redirect_uri = "http://localhost:8765"
    token_url = f"{issuer.authority}/{TENANT}/oauth2/v2.0/token"

    def redeem(client: httpx.Client, code: str, **changes: str) -> httpx.Response:
        form = {
            "grant_type": "authorization_code",
            "client_id": DEFAULT_CLIENT_ID,
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            **changes,
        }
        return client.post(token_url, data=form)

    with browser_client(issuer) as client:
        refusals = {
            "wrong verifier": redeem(
                client,
                authorization_code(client, issuer, pkce_challenge(verifier), redirect_uri),
                code_verifier=secrets.token_urlsafe(48),
            ),
            "no verifier": redeem(
                client,
                authorization_code(client, issuer, pkce_challenge(verifier), redirect_uri),
                code_verifier="",
            ),
            "other redirect uri": redeem(
                client,
                authorization_code(client, issuer, pkce_challenge(verifier), redirect_uri),
                redirect_uri="http://localhost:8766",
            ),
            "other client": redeem(
                client,
                authorization_code(client, issuer, pkce_challenge(verifier), redirect_uri),
                client_id="another-client",
            ),
        }
        code = authorization_code(client, issuer, pkce_challenge(verifier), redirect_uri)
        granted = redeem(client, code)
        again = redeem(client, code)

    for why, answer in refusals.items():
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_grant"), why
    assert (
        "AADSTS50148: The code_verifier does not match"
        in refusals["wrong verifier"].json()["error_description"]
    )
    assert "AADSTS50148" in refusals["no verifier"].json()["error_description"]
    assert "AADSTS500112" in refusals["other redirect uri"].json()["error_description"]
    assert granted.status_code == 200, granted.text
    body = granted.json()
    assert claims(body["access_token"], issuer)["scp"] == SCOPE
    assert {"refresh_token", "id_token", "client_info"} <= set(body)
    # A code is spent by its first use, granted or not.
    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")
    assert "AADSTS54005" in again.json()["error_description"]
    assert (issuer.authorization_requests, issuer.authorization_code_redemptions) == (5, 6)


def authorization_request(issuer: EntraIssuer, **change: str) -> httpx.Response:
    """The issuer's answer to a browser's authorization request: a valid one, with `change` applied."""
    params = {
        "client_id": DEFAULT_CLIENT_ID,
        "response_type": "code",
        "redirect_uri": "http://127.0.0.1:8765/",
        "scope": API_SCOPE,
        "state": "s-1",
        "code_challenge": pkce_challenge(secrets.token_urlsafe(48)),
        "code_challenge_method": "S256",
        **change,
    }
    with browser_client(issuer) as client:
        return client.get(f"{issuer.authority}/{TENANT}/oauth2/v2.0/authorize", params=params)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge": ""}, "invalid_request"),
        ({"state": ""}, "invalid_request"),
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"scope": "https://graph.microsoft.com/.default openid"}, "invalid_scope"),
    ],
)
def test_the_issuer_sends_a_bad_authorization_request_back_with_an_error(
    issuer: EntraIssuer, change: dict[str, str], error: str
) -> None:
    answer = authorization_request(issuer, **change)
    assert answer.status_code == 302
    fields = parse_qs(urlsplit(answer.headers["Location"]).query)
    assert fields["error"] == [error]
    assert "code" not in fields


@pytest.mark.parametrize(
    "redirect_uri",
    ["https://evil.example/cb", "http://evil.example:8765", "http://localhost", "http://user@localhost:1/"],
)
def test_the_issuer_never_sends_the_browser_to_a_redirect_uri_other_than_loopback(
    issuer: EntraIssuer, redirect_uri: str
) -> None:
    answer = authorization_request(issuer, redirect_uri=redirect_uri)
    assert answer.status_code == 400
    assert "location" not in answer.headers
    assert "AADSTS50011" in answer.text


# --- is there a browser? ---------------------------------------------------------------------------


@pytest.fixture
def browser_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """`webbrowser.get` finds a browser (it is never opened); the list records each lookup."""
    lookups: list[str | None] = []

    def found(using: str | None = None) -> webbrowser.BaseBrowser:
        lookups.append(using)
        return webbrowser.BaseBrowser("a-browser")

    monkeypatch.setattr(webbrowser, "get", found)
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY"):
        monkeypatch.delenv(name, raising=False)
    return lookups


def test_on_linux_without_a_display_there_is_no_browser_even_over_ssh(
    browser_lookups: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    assert browser_available() is False
    monkeypatch.setenv("SSH_CONNECTION", "203.0.113.7 50022 192.0.2.10 22")
    assert browser_available() is False
    assert browser_lookups == []  # a text-mode browser that webbrowser may know does not count

    monkeypatch.setenv("DISPLAY", "localhost:10.0")  # X forwarding over SSH
    assert browser_available() is True
    monkeypatch.delenv("DISPLAY")
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    assert browser_available() is True
    assert browser_lookups == [None, None]


def test_with_a_display_but_no_browser_known_there_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def none_found(using: str | None = None) -> webbrowser.BaseBrowser:
        raise webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(webbrowser, "get", none_found)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("DISPLAY", ":0")
    assert browser_available() is False


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_on_macos_and_windows_an_ssh_session_has_no_browser(
    browser_lookups: list[str | None], monkeypatch: pytest.MonkeyPatch, platform: str
) -> None:
    monkeypatch.setattr(sys, "platform", platform)
    assert browser_available() is True
    monkeypatch.setenv("SSH_TTY", "/dev/ttys001")
    assert browser_available() is False
