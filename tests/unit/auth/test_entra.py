"""Entra discovery and the verifier it builds, without a server process; the app-role rule."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from security.calls import CLIENT_ID, OTHER_TENANT, SCOPE, TENANT
from support.entra_issuer import EntraIssuer

from app.auth.entra import EntraDiscovery, discovery_urls, open_entra
from app.auth.verifier import StaticKeySource, TokenVerifier
from app.errors import AuthError
from app.settings import Settings

pytestmark = pytest.mark.anyio

AUTHORITY = "https://login.example.invalid"


def entra_settings(issuer: EntraIssuer, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "auth_mode": "entra",
        "entra_authority": issuer.authority + "/",
        "entra_tenant_id": TENANT,
        "entra_client_id": CLIENT_ID,
        **overrides,
    }
    return Settings(**values)


class Documents:
    """Serves the v2 and v1 documents Entra publishes for `tenant`, as a MockTransport handler."""

    def __init__(self, tenant: str, *, jwks_uri: str | None = None) -> None:
        placeholder = "{tenantid}" if tenant in ("organizations", "common") else tenant
        self.by_url = {
            discovery_urls(AUTHORITY, tenant)[0]: {
                "issuer": f"{AUTHORITY}/{placeholder}/v2.0",
                "jwks_uri": jwks_uri or f"{AUTHORITY}/{tenant}/discovery/v2.0/keys",
            },
            discovery_urls(AUTHORITY, tenant)[1]: {
                "issuer": f"https://sts.windows.net/{placeholder}/",
                "jwks_uri": f"{AUTHORITY}/{tenant}/discovery/keys",
            },
        }
        self.requests = 0
        self.failing = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        document = self.by_url.get(str(request.url))
        if self.failing or document is None:
            return httpx.Response(503 if self.failing else 404)
        return httpx.Response(200, json=document)


@pytest.fixture
async def http() -> AsyncIterator[list[httpx.AsyncClient]]:
    clients: list[httpx.AsyncClient] = []
    yield clients
    for client in clients:
        await client.aclose()


def discovery(http: list[httpx.AsyncClient], documents: Documents, tenant: str) -> EntraDiscovery:
    http.append(httpx.AsyncClient(transport=httpx.MockTransport(documents)))
    return EntraDiscovery(http[-1], AUTHORITY, tenant)


def test_the_discovery_urls_are_the_v2_and_v1_documents_under_the_authority() -> None:
    assert discovery_urls(AUTHORITY + "/", TENANT) == (
        f"{AUTHORITY}/{TENANT}/v2.0/.well-known/openid-configuration",
        f"{AUTHORITY}/{TENANT}/.well-known/openid-configuration",
    )


async def test_single_tenant_issuers_come_from_both_documents(http: list[httpx.AsyncClient]) -> None:
    found = discovery(http, Documents(TENANT), TENANT)
    assert found.issuers_for_tenant(TENANT) == ()  # nothing trusted before discovery

    assert await found.jwks_uri() == f"{AUTHORITY}/{TENANT}/discovery/v2.0/keys"
    assert found.issuers_for_tenant(TENANT) == (
        f"{AUTHORITY}/{TENANT}/v2.0",
        f"https://sts.windows.net/{TENANT}/",
    )


async def test_multi_tenant_issuers_fill_the_placeholder_with_the_token_tenant(
    http: list[httpx.AsyncClient],
) -> None:
    found = discovery(http, Documents("organizations"), "organizations")
    await found.jwks_uri()
    assert found.issuers_for_tenant(OTHER_TENANT) == (
        f"{AUTHORITY}/{OTHER_TENANT}/v2.0",
        f"https://sts.windows.net/{OTHER_TENANT}/",
    )


async def test_discovery_is_read_once_and_a_failure_is_retried(http: list[httpx.AsyncClient]) -> None:
    documents = Documents(TENANT)
    documents.failing = True
    found = discovery(http, documents, TENANT)
    with pytest.raises(httpx.HTTPStatusError):
        await found.jwks_uri()

    documents.failing = False
    await found.jwks_uri()
    await found.jwks_uri()
    assert documents.requests == 1 + 2  # the failed try, then both documents once


@pytest.mark.parametrize("jwks_uri", ["http://keys.example.invalid/keys", "file:///etc/keys", "keys"])
async def test_a_key_set_url_off_https_is_refused(http: list[httpx.AsyncClient], jwks_uri: str) -> None:
    found = discovery(http, Documents(TENANT, jwks_uri=jwks_uri), TENANT)
    with pytest.raises(ValueError, match="https"):
        await found.jwks_uri()


async def test_open_entra_advertises_the_authority_and_scopes_and_fetches_nothing(
    issuer: EntraIssuer,
) -> None:
    fetches = issuer.key_fetches + issuer.discovery_fetches
    setup = await open_entra(entra_settings(issuer, entra_required_scopes="access_as_user,Other.Scope"))
    try:
        assert setup.verifier is not None
        assert setup.authorization_servers == (f"{issuer.authority}/{TENANT}/v2.0",)
        assert setup.scopes_supported == (
            f"api://{CLIENT_ID}/access_as_user",
            f"api://{CLIENT_ID}/Other.Scope",
        )
        assert issuer.key_fetches + issuer.discovery_fetches == fetches
        assert setup.readiness is not None
        await setup.readiness()  # loads discovery and keys from the local issuer
        assert issuer.key_fetches >= 1
    finally:
        assert setup.aclose is not None
        await setup.aclose()


async def test_open_entra_verifies_v1_and_v2_tokens(issuer: EntraIssuer) -> None:
    setup = await open_entra(entra_settings(issuer, entra_tenant_id=TENANT.upper()))
    try:
        assert setup.verifier is not None
        oid = "0d9c8b7a-6f5e-4d3c-8b2a-190817263544"
        v2 = await setup.verifier.verify(issuer.mint_v2(oid=oid, tid=TENANT))
        v1 = await setup.verifier.verify(issuer.mint_v1(oid=oid, tid=TENANT))
        assert (v2.oid, v2.tid) == (v1.oid, v1.tid) == (oid, TENANT)
        assert SCOPE in v2.scopes
    finally:
        assert setup.aclose is not None
        await setup.aclose()


# --- the app-role rule of TokenVerifier --------------------------------------------------------


def app_verifier(issuer: EntraIssuer, app_role: str | None) -> TokenVerifier:
    return TokenVerifier(
        keys=StaticKeySource({issuer.key.kid: issuer.key.private_key.public_key()}),
        issuers_for_tenant=lambda tid: (issuer.v2_issuer(tid),),
        audiences=(CLIENT_ID,),
        required_scopes=(SCOPE,),
        app_role=app_role,
    )


async def test_an_app_token_with_the_role_is_the_app_itself(issuer: EntraIssuer) -> None:
    app_oid = "5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d"
    token = issuer.sign(issuer.claims_app(oid=app_oid, tid=TENANT, roles=["Anvil.Ask"]))
    principal = await app_verifier(issuer, "Anvil.Ask").verify(token)
    assert (principal.oid, principal.tid, principal.scopes) == (app_oid, TENANT, frozenset())


@pytest.mark.parametrize("roles", [["Other"], [], "Anvil.Ask", None])
async def test_an_app_token_without_the_role_is_refused(issuer: EntraIssuer, roles: Any) -> None:
    claims = issuer.claims_app(oid="5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d", tid=TENANT, roles=[])
    claims["roles"] = roles
    with pytest.raises(AuthError) as caught:
        await app_verifier(issuer, "Anvil.Ask").verify(issuer.sign(claims))
    assert (caught.value.status, caught.value.error) == (403, "insufficient_scope")


async def test_without_an_app_role_app_tokens_stay_refused(issuer: EntraIssuer) -> None:
    token = issuer.sign(
        issuer.claims_app(oid="5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d", tid=TENANT, roles=["Anvil.Ask"])
    )
    with pytest.raises(AuthError) as caught:
        await app_verifier(issuer, None).verify(token)
    assert (caught.value.status, caught.value.error) == (401, "invalid_token")


async def test_a_delegated_token_does_not_need_the_app_role(issuer: EntraIssuer) -> None:
    token = issuer.mint_v2(oid="5a4b3c2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d", tid=TENANT)
    assert (await app_verifier(issuer, "Anvil.Ask").verify(token)).scopes == {SCOPE}


@pytest.mark.parametrize("role", ["", "two words"])
def test_an_unusable_app_role_is_refused_at_construction(issuer: EntraIssuer, role: str) -> None:
    with pytest.raises(ValueError):
        app_verifier(issuer, role)


@pytest.mark.parametrize(("allowed", "accepted"), [(TENANT, True), (OTHER_TENANT, False)])
async def test_an_allow_list_can_only_narrow_a_single_tenant_app(
    issuer: EntraIssuer, allowed: str, accepted: bool
) -> None:
    setup = await open_entra(entra_settings(issuer, entra_allowed_tenants=f"{allowed},{OTHER_TENANT}"))
    try:
        assert setup.verifier is not None
        own = issuer.mint_v2(oid="0d9c8b7a-6f5e-4d3c-8b2a-190817263544", tid=TENANT)
        other = issuer.mint_v2(oid="0d9c8b7a-6f5e-4d3c-8b2a-190817263544", tid=OTHER_TENANT)
        if accepted:
            assert (await setup.verifier.verify(own)).tid == TENANT
        else:
            with pytest.raises(AuthError, match="tenant is not allowed"):
                await setup.verifier.verify(own)
        with pytest.raises(AuthError):
            await setup.verifier.verify(other)  # never another tenant, listed or not
    finally:
        assert setup.aclose is not None
        await setup.aclose()
