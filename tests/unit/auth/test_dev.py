"""The server's dev sign-in (`app.auth.dev`): what the dev key mints, its verifier accepts, and
refuses what it must."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest

from app.auth.dev import DEV_CLIENT_ID, DEV_SCOPE, DEV_TENANT_ID, DevIssuer
from app.errors import AuthError

NOW = 1_700_000_000.0
OTHER_TENANT = "22222222-2222-4222-8222-222222222222"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> DevIssuer:
    """One issuer per module: RSA key generation is slow."""
    return DevIssuer.load_or_create(tmp_path_factory.mktemp("dev-issuer"))


def fixed_clock() -> float:
    return NOW


@pytest.mark.anyio
async def test_a_server_loading_the_key_to_verify_accepts_what_the_cli_mints(tmp_path: Path) -> None:
    signer = DevIssuer.load_or_create(tmp_path)
    server = DevIssuer.load_or_create(tmp_path, verify_only=True)
    principal = await server.verifier(clock=fixed_clock).verify(signer.mint("alice", now=NOW))
    assert principal.name == "alice"


# --- verification -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_minted_token_verifies(issuer: DevIssuer) -> None:
    principal = await issuer.verifier(clock=fixed_clock).verify(issuer.mint("alice", now=NOW))
    assert principal.tid == DEV_TENANT_ID
    assert principal.scopes == {DEV_SCOPE}
    assert principal.expires_at == NOW + 3600
    assert principal.name == "alice"


@pytest.mark.anyio
async def test_token_for_another_tenant_verifies(issuer: DevIssuer) -> None:
    token = issuer.mint("alice", tenant=OTHER_TENANT, now=NOW)
    principal = await issuer.verifier(clock=fixed_clock).verify(token)
    assert principal.tid == OTHER_TENANT


@pytest.mark.anyio
async def test_api_audience_verifies(issuer: DevIssuer) -> None:
    claims = jwt.decode(issuer.mint("alice", now=NOW), options={"verify_signature": False})
    token = issuer.mint_claims({**claims, "aud": f"api://{DEV_CLIENT_ID}"})
    assert (await issuer.verifier(clock=fixed_clock).verify(token)).name == "alice"


@pytest.mark.anyio
async def test_allowed_tenants_are_passed_on(issuer: DevIssuer) -> None:
    verifier = issuer.verifier(clock=fixed_clock, allowed_tenants=(DEV_TENANT_ID,))
    with pytest.raises(AuthError, match="tenant is not allowed"):
        await verifier.verify(issuer.mint("alice", tenant=OTHER_TENANT, now=NOW))


@pytest.mark.anyio
async def test_expired_dev_token_is_refused(issuer: DevIssuer) -> None:
    token = issuer.mint("alice", ttl=60, now=NOW - 3600)
    with pytest.raises(AuthError, match="expired"):
        await issuer.verifier(clock=fixed_clock).verify(token)


@pytest.mark.anyio
async def test_token_without_scope_is_insufficient_scope(issuer: DevIssuer) -> None:
    with pytest.raises(AuthError) as caught:
        await issuer.verifier(clock=fixed_clock).verify(issuer.mint("alice", scopes=(), now=NOW))
    assert (caught.value.status, caught.value.scope) == (403, DEV_SCOPE)


@pytest.mark.anyio
async def test_mint_claims_makes_odd_tokens(issuer: DevIssuer) -> None:
    claims = jwt.decode(issuer.mint("alice", now=NOW), options={"verify_signature": False})
    del claims["oid"]
    with pytest.raises(AuthError, match="oid"):
        await issuer.verifier(clock=fixed_clock).verify(issuer.mint_claims(claims))


@pytest.mark.anyio
async def test_mint_claims_headers_override_kid(issuer: DevIssuer) -> None:
    claims = jwt.decode(issuer.mint("alice", now=NOW), options={"verify_signature": False})
    token = issuer.mint_claims(claims, headers={"kid": "rotated-away"})
    with pytest.raises(AuthError, match="signing key is not known"):
        await issuer.verifier(clock=fixed_clock).verify(token)
