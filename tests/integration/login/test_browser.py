"""Signing in in a web browser: the tests play the browser, which opens the issuer's sign-in page
and takes the answer back to the sign-in's loopback listener (`app.client.loopback`); and
whether there is a browser to open at all. No real browser is ever opened."""

from __future__ import annotations

import re
import socket
import stat
import sys
import threading
import webbrowser
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import requests
from security.calls import SCOPE, TENANT, new_id
from support.entra_issuer import EntraIssuer
from support.entra_keys import LOCAL_USER_OID
from support.sign_in import (
    API_SCOPE,
    SERVER_URL,
    USER,
    browser_client,
    cached_items,
    claims,
    settings_for,
    signed_in,
)

from app.client.discovery import DEFAULT_CLIENT_ID
from app.client.errors import (
    SignInFailed,
    SignInUnavailable,
)
from app.client.loopback import browser_available
from app.client.signin import Account, UserSignIn

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
