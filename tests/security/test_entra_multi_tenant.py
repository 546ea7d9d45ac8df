"""A multi-tenant app (`organizations` + allow-list) that also admits apps holding an app role."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.entra_issuer import EntraIssuer
from support.jsonrpc import mcp_call

from .calls import (
    OTHER_TENANT,
    TENANT,
    ask_mcp,
    bearer,
    entra_env,
    new_id,
    rows_for,
    stored_rows,
    tool_result,
)

ALLOWED = ("1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6", "2f3e4d5c-6b7a-4899-8b0c-d2e3f4a5b6c7")
APP_ROLE = "Anvil.Ask"


@pytest.fixture(scope="module")
def multi(issuer: EntraIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    env = entra_env(
        issuer,
        ANVIL_ENTRA_TENANT_ID="organizations",
        ANVIL_ENTRA_ALLOWED_TENANTS=",".join(ALLOWED),
        ANVIL_ENTRA_APP_ROLE=APP_ROLE,
    )
    with run_anvil(tmp_path_factory.mktemp("entra-multi"), env) as running:
        yield running


@pytest.mark.parametrize("tenant", [TENANT, OTHER_TENANT])
def test_a_tenant_off_the_allow_list_is_refused_with_no_store_call(
    multi: AnvilServer, issuer: EntraIssuer, tenant: str
) -> None:
    conversation_id = new_id("off-list")
    before = stored_rows(multi.data_dir)

    response = ask_mcp(multi, issuer.mint_v2(oid=new_id(""), tid=tenant), "let me in", conversation_id)

    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert "tenant is not allowed" in response.json()["detail"]
    assert rows_for(multi.data_dir, conversation_id) == 0
    assert stored_rows(multi.data_dir) == before


@pytest.mark.parametrize("tenant", ALLOWED)
def test_allowed_tenants_sign_in_with_v2_and_v1_tokens(
    multi: AnvilServer, issuer: EntraIssuer, tenant: str
) -> None:
    # Both issuers come from the `organizations` documents' {tenantid} templates.
    oid, conversation_id = new_id(""), new_id("allowed")
    first = tool_result(ask_mcp(multi, issuer.mint_v2(oid=oid, tid=tenant), "one", conversation_id))
    second = tool_result(ask_mcp(multi, issuer.mint_v1(oid=oid, tid=tenant), "two", conversation_id))
    assert first["structuredContent"]["turn"] == 1
    assert second["structuredContent"]["turn"] == 2


def test_a_token_naming_an_allowed_tenant_in_its_issuer_only_is_refused(
    multi: AnvilServer, issuer: EntraIssuer
) -> None:
    claims = issuer.claims_v2(oid=new_id(""), tid=OTHER_TENANT, iss=issuer.v2_issuer(ALLOWED[0]))
    response = ask_mcp(multi, issuer.sign(claims), "sneaky")
    assert response.status_code == 401
    assert "issuer is not trusted" in response.json()["detail"]


def test_the_metadata_names_the_organizations_authority(multi: AnvilServer, issuer: EntraIssuer) -> None:
    document = httpx.get(f"{multi.url}/.well-known/oauth-protected-resource/mcp").json()
    assert document["authorization_servers"] == [f"{issuer.authority}/organizations/v2.0"]


def test_an_app_holding_the_app_role_is_a_principal_of_its_own(
    multi: AnvilServer, issuer: EntraIssuer
) -> None:
    app_oid, conversation_id = new_id(""), new_id("app")
    token = issuer.sign(issuer.claims_app(oid=app_oid, tid=ALLOWED[0], roles=["Other.Role", APP_ROLE]))

    first = tool_result(ask_mcp(multi, token, "nightly job", conversation_id))["structuredContent"]
    second = tool_result(ask_mcp(multi, token, "nightly job again", conversation_id))["structuredContent"]

    assert (first["turn"], second["turn"]) == (1, 2)
    assert second["answer"] == "Echo: nightly job again (turn 2; previous question: nightly job)"


def test_an_app_without_the_app_role_is_403(multi: AnvilServer, issuer: EntraIssuer) -> None:
    conversation_id = new_id("no-role")
    token = issuer.sign(issuer.claims_app(oid=new_id(""), tid=ALLOWED[0], roles=["Other.Role"]))

    response = mcp_call(multi, "ask", {"question": "q", "conversationId": conversation_id}, bearer(token))

    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert APP_ROLE in response.json()["detail"]
    assert rows_for(multi.data_dir, conversation_id) == 0


def test_an_app_of_a_tenant_off_the_allow_list_is_refused(multi: AnvilServer, issuer: EntraIssuer) -> None:
    token = issuer.sign(issuer.claims_app(oid=new_id(""), tid=TENANT, roles=[APP_ROLE]))
    response = ask_mcp(multi, token, "q")
    assert response.status_code == 401
