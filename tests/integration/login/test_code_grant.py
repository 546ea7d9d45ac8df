"""The Entra stand-in's authorization code grant, which the browser sign-in tests rely on: a code
redeemed once, for its client, redirect URI and PKCE verifier; a loopback redirect URI only."""

from __future__ import annotations

import secrets
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from security.calls import SCOPE, TENANT
from support.entra_issuer import EntraIssuer
from support.entra_sign_in import pkce_challenge
from support.sign_in import (
    API_SCOPE,
    browser_client,
    claims,
)

from app.client.discovery import DEFAULT_CLIENT_ID

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
