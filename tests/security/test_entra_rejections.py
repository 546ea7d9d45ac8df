"""Every token Anvil must refuse is refused with 401, and the store is never touched.

Each case sends an `ask` that names a fresh conversationId, over MCP and over REST; afterwards
the server's SQLite file has no row for that id and the whole table is unchanged.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from support.anvil_server import AnvilServer
from support.entra_issuer import EntraIssuer
from support.entra_keys import b64json, hs256_token, signing_key, unsigned_token
from support.jsonrpc import mcp_call

from .calls import (
    METADATA_URL,
    OTHER_TENANT,
    SCOPE,
    TENANT,
    bearer,
    new_id,
    rows_for,
    stored_rows,
)


@dataclass
class Attempt:
    """How a case presents its credentials: extra headers, and a query string."""

    headers: dict[str, str] = field(default_factory=dict)
    query: str = ""
    #: False when the request carries no Authorization header at all (no error code then).
    token_sent: bool = True


def claims(issuer: EntraIssuer, **overrides: Any) -> dict[str, Any]:
    return issuer.claims_v2(oid=new_id(""), tid=TENANT, **overrides)


def without(issuer: EntraIssuer, name: str) -> dict[str, Any]:
    payload = claims(issuer)
    del payload[name]
    return payload


def expired(issuer: EntraIssuer) -> Attempt:
    # exp an hour ago: far past the 60 seconds of leeway.
    return Attempt(bearer(issuer.sign(claims(issuer, now=time.time() - 7200))))


def not_yet_valid(issuer: EntraIssuer) -> Attempt:
    return Attempt(bearer(issuer.sign(claims(issuer, nbf=int(time.time()) + 3600))))


def wrong_audience(issuer: EntraIssuer) -> Attempt:
    return Attempt(bearer(issuer.sign(claims(issuer, aud=new_id("")))))


def wrong_issuer(issuer: EntraIssuer) -> Attempt:
    foreign = f"https://login.microsoftonline.com/{TENANT}/v2.0"
    return Attempt(bearer(issuer.sign(claims(issuer, iss=foreign))))


def another_tenant(issuer: EntraIssuer) -> Attempt:
    # Genuine in every other respect: the issuer matches the other tenant, the key is Entra's.
    return Attempt(bearer(issuer.mint_v2(oid=new_id(""), tid=OTHER_TENANT)))


def another_tenant_our_issuer(issuer: EntraIssuer) -> Attempt:
    # A single-tenant issuer names no placeholder, so only the tenant rule can catch this one.
    payload = claims(issuer)  # iss names our tenant
    payload["tid"] = OTHER_TENANT
    return Attempt(bearer(issuer.sign(payload)))


def alg_none(issuer: EntraIssuer) -> Attempt:
    return Attempt(bearer(unsigned_token(claims(issuer), {"alg": "none", "typ": "JWT"})))


def hs256_with_public_key(issuer: EntraIssuer) -> Attempt:
    return Attempt(bearer(hs256_token(claims(issuer), issuer.key.public_pem, issuer.key.kid)))


def unknown_key(issuer: EntraIssuer) -> Attempt:
    return Attempt(bearer(issuer.sign(claims(issuer), key=signing_key("rogue-key"))))


def tampered_payload(issuer: EntraIssuer) -> Attempt:
    header, _, signature = issuer.sign(claims(issuer)).split(".")
    forged = b64json(claims(issuer))  # another oid, same signature
    return Attempt(bearer(f"{header}.{forged}.{signature}"))


def tampered_kid(issuer: EntraIssuer) -> Attempt:
    _, payload, signature = issuer.sign(claims(issuer)).split(".")
    # The other published key: known, so the signature is checked with it and fails.
    header = b64json({"alg": "RS256", "typ": "JWT", "kid": "entra-key-2"})
    return Attempt(bearer(f"{header}.{payload}.{signature}"))


def missing_oid(issuer: EntraIssuer) -> Attempt:
    return Attempt(bearer(issuer.sign(without(issuer, "oid"))))


def missing_tid(issuer: EntraIssuer) -> Attempt:
    return Attempt(bearer(issuer.sign(without(issuer, "tid"))))


def malformed(issuer: EntraIssuer) -> Attempt:
    return Attempt(bearer("eyJub3QiOiJhIHRva2VuIn0.not-base64!.###"))


def in_query_string(issuer: EntraIssuer) -> Attempt:
    return Attempt(query=f"?access_token={issuer.mint_v2(oid=new_id(''), tid=TENANT)}", token_sent=False)


def in_cookie(issuer: EntraIssuer) -> Attempt:
    token = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    return Attempt({"Cookie": f"access_token={token}"}, token_sent=False)


def basic_scheme(issuer: EntraIssuer) -> Attempt:
    credentials = base64.b64encode(f"user:{issuer.mint_v2(oid=new_id(''), tid=TENANT)}".encode())
    return Attempt({"Authorization": f"Basic {credentials.decode()}"})


def empty_bearer(issuer: EntraIssuer) -> Attempt:
    # HTTP clients strip trailing spaces, so "Bearer " arrives as the bare scheme name.
    return Attempt({"Authorization": "Bearer"})


def app_only(issuer: EntraIssuer) -> Attempt:
    # This server sets no ANVIL_ENTRA_APP_ROLE, so no role admits an app-only token.
    token = issuer.sign(issuer.claims_app(oid=new_id(""), tid=TENANT, roles=["Anvil.Ask"]))
    return Attempt(bearer(token))


CASES: dict[str, tuple[Callable[[EntraIssuer], Attempt], str]] = {
    "expired": (expired, "has expired"),
    "nbf-in-the-future": (not_yet_valid, "not valid yet"),
    "wrong-audience": (wrong_audience, "another audience"),
    "wrong-issuer": (wrong_issuer, "issuer is not trusted"),
    "another-tenant": (another_tenant, "issuer is not trusted"),
    "another-tenant-claiming-our-issuer": (another_tenant_our_issuer, "tenant is not allowed"),
    "alg-none": (alg_none, "must be signed with RS256"),
    "hs256-signed-with-the-public-key": (hs256_with_public_key, "must be signed with RS256"),
    "rs256-from-an-unknown-key": (unknown_key, "signing key is not known"),
    "tampered-payload": (tampered_payload, "signature is invalid"),
    "tampered-header-kid": (tampered_kid, "signature is invalid"),
    "missing-oid": (missing_oid, "no user object id"),
    "missing-tid": (missing_tid, "no tenant id"),
    "malformed": (malformed, "malformed"),
    "token-in-query-string": (in_query_string, "Sign-in required"),
    "token-in-cookie": (in_cookie, "Sign-in required"),
    "basic-scheme": (basic_scheme, "Only the Bearer scheme"),
    "empty-bearer": (empty_bearer, "empty bearer token"),
    "app-only-token": (app_only, "App-only access tokens are not accepted"),
}


def send(server: AnvilServer, surface: str, attempt: Attempt, conversation_id: str) -> httpx.Response:
    arguments = {"question": "who am I?", "conversationId": conversation_id}
    if surface == "mcp":
        return mcp_call(server, "ask", arguments, attempt.headers, url=server.mcp_url + attempt.query)
    return httpx.post(
        f"{server.url}/api/ask{attempt.query}", json=arguments, headers=attempt.headers, timeout=30
    )


@pytest.mark.parametrize("surface", ["mcp", "rest"])
@pytest.mark.parametrize("case", list(CASES))
def test_refused_with_401_and_no_store_call(
    server: AnvilServer, issuer: EntraIssuer, case: str, surface: str
) -> None:
    build, reason = CASES[case]
    attempt = build(issuer)
    conversation_id = new_id(case)
    before = stored_rows(server.data_dir)

    response = send(server, surface, attempt, conversation_id)

    assert response.status_code == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert reason in response.json()["detail"]
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith(f'Bearer resource_metadata="{METADATA_URL}"')
    if attempt.token_sent:
        assert 'error="invalid_token"' in challenge
    else:
        # RFC 6750 3.1: a request without credentials gets no error code.
        assert "error=" not in challenge
    assert rows_for(server.data_dir, conversation_id) == 0
    assert stored_rows(server.data_dir) == before


@pytest.mark.parametrize("surface", ["mcp", "rest"])
def test_a_token_without_the_scope_is_403_insufficient_scope(
    server: AnvilServer, issuer: EntraIssuer, surface: str
) -> None:
    attempt = Attempt(bearer(issuer.mint_v2(oid=new_id(""), tid=TENANT, scp="User.Read openid")))
    conversation_id = new_id("no-scope")
    before = stored_rows(server.data_dir)

    response = send(server, surface, attempt, conversation_id)

    assert response.status_code == 403, response.text
    challenge = response.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge
    assert f'scope="{SCOPE}"' in challenge
    assert f'resource_metadata="{METADATA_URL}"' in challenge
    assert rows_for(server.data_dir, conversation_id) == 0
    assert stored_rows(server.data_dir) == before


def test_a_genuine_token_is_accepted_so_the_refusals_above_mean_something(
    server: AnvilServer, issuer: EntraIssuer
) -> None:
    conversation_id = new_id("control")
    token = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    for surface in ("mcp", "rest"):
        response = send(server, surface, Attempt(bearer(token)), conversation_id)
        assert response.status_code == 200, response.text
    assert rows_for(server.data_dir, conversation_id) == 1
