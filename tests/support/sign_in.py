"""What the sign-in tests share: the TLS Entra stand-in, MSAL's session trusting it, a cache in
the test's own folder, and a user who approves the device code."""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import jwt
import requests
from security.calls import CLIENT_ID, SCOPE, TENANT

from app.client.discovery import SignInSettings
from app.client.signin import UserSignIn
from support.entra_issuer import EntraIssuer

API_SCOPE = f"api://{CLIENT_ID}/{SCOPE}"
SERVER_URL = "https://anvil.example.com/mcp"
USER = "ada@contoso.example"
USER_CODE = re.compile(r"enter the code (\S+) to authenticate")


def stopped_for_good(issuer: EntraIssuer) -> None:
    name = f"entra-issuer-{issuer.port}"
    issuer.stop()
    assert not [thread for thread in threading.enumerate() if thread.name == name]


def msal_session(issuer: EntraIssuer) -> requests.Session:
    """MSAL's HTTP client trusting the issuer's CA (and not a CA bundle named by the environment,
    which requests would otherwise prefer)."""
    session = requests.Session()
    session.trust_env = False
    session.verify = str(issuer.ca_file)
    return session


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


def browser_client(issuer: EntraIssuer) -> httpx.Client:
    """An HTTP client for the browser: trusts the issuer's CA, ignores proxies and the environment."""
    context = ssl.create_default_context(cafile=str(issuer.ca_file))
    return httpx.Client(verify=context, trust_env=False, timeout=10)
