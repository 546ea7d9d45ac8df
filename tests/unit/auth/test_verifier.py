"""TokenVerifier: every rejection rule, the accepted shapes, and the verified-token cache."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.auth.verifier import StaticKeySource, TokenVerifier
from app.domain.principal import Principal
from app.errors import AuthError

NOW = 1_700_000_000.0
KID = "test-key-1"
TENANT = "11111111-1111-4111-8111-111111111111"
OTHER_TENANT = "22222222-2222-4222-8222-222222222222"
CLIENT_ID = "33333333-3333-4333-8333-333333333333"
OID = "44444444-4444-4444-8444-444444444444"
SCOPE = "access_as_user"
AUTHORITY = "https://login.example.invalid"


@functools.cache
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def other_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def issuer(tid: str) -> str:
    return f"{AUTHORITY}/{tid}/v2.0"


class Clock:
    """A settable clock, so expiry can be tested without sleeping."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class CountingKeys:
    """Wraps a key source and counts lookups, to observe the cache from outside."""

    def __init__(self) -> None:
        self.inner = StaticKeySource({KID: signing_key().public_key()})
        self.calls = 0

    async def key_for(self, kid: str | None) -> Any:
        self.calls += 1
        return await self.inner.key_for(kid)


def make_verifier(
    *,
    keys: Any = None,
    clock: Clock | None = None,
    allowed_tenants: tuple[str, ...] | None = None,
    required_scopes: tuple[str, ...] = (SCOPE,),
    cache_size: int = 100,
) -> TokenVerifier:
    return TokenVerifier(
        keys=keys or StaticKeySource({KID: signing_key().public_key()}),
        issuers_for_tenant=lambda tid: (issuer(tid),),
        audiences=(CLIENT_ID, f"api://{CLIENT_ID}"),
        required_scopes=required_scopes,
        allowed_tenants=allowed_tenants,
        clock=clock or Clock(),
        cache_size=cache_size,
    )


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid delegated-token claims; a value of None removes that claim."""
    base: dict[str, Any] = {
        "aud": CLIENT_ID,
        "iss": issuer(TENANT),
        "iat": int(NOW) - 10,
        "nbf": int(NOW) - 10,
        "exp": int(NOW) + 3600,
        "oid": OID,
        "tid": TENANT,
        "sub": "pairwise-subject",
        "scp": SCOPE,
        "name": "Ada",
        "preferred_username": "ada@example.invalid",
        "ver": "2.0",
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def mint(
    payload: Mapping[str, Any] | None = None,
    *,
    key: rsa.RSAPrivateKey | None = None,
    kid: str = KID,
) -> str:
    return jwt.encode(
        dict(claims() if payload is None else payload),
        key or signing_key(),
        algorithm="RS256",
        headers={"kid": kid},
    )


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(value: Mapping[str, Any]) -> str:
    return b64url(json.dumps(value).encode())


async def rejected(verifier: TokenVerifier, token: str) -> AuthError:
    """Verify `token`, expect an AuthError, and check it leaks no part of the token."""
    with pytest.raises(AuthError) as caught:
        await verifier.verify(token)
    error = caught.value
    for text in (error.description, str(error), repr(error)):
        if token:
            assert token not in text
        for segment in token.split("."):
            if len(segment) >= 8:
                assert segment not in text
    return error


async def assert_invalid(verifier: TokenVerifier, token: str, wording: str) -> None:
    error = await rejected(verifier, token)
    assert error.status == 401
    assert error.error == "invalid_token"
    assert error.scope is None
    assert wording in error.description.lower()


# --- accepted -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_valid_token_gives_principal() -> None:
    principal = await make_verifier().verify(mint())
    assert principal == Principal(
        oid=OID, tid=TENANT, scopes=frozenset({SCOPE}), expires_at=NOW + 3600, name="Ada"
    )


@pytest.mark.anyio
async def test_api_audience_form_is_accepted() -> None:
    principal = await make_verifier().verify(mint(claims(aud=f"api://{CLIENT_ID}")))
    assert principal.oid == OID


@pytest.mark.anyio
async def test_audience_list_naming_us_is_accepted() -> None:
    principal = await make_verifier().verify(mint(claims(aud=["someone-else", CLIENT_ID])))
    assert principal.oid == OID


@pytest.mark.anyio
async def test_name_falls_back_to_preferred_username_then_none() -> None:
    verifier = make_verifier()
    assert (await verifier.verify(mint(claims(name=None)))).name == "ada@example.invalid"
    assert (await verifier.verify(mint(claims(name=None, preferred_username=None)))).name is None


@pytest.mark.anyio
async def test_all_scopes_are_kept() -> None:
    principal = await make_verifier().verify(mint(claims(scp=f"read {SCOPE} write")))
    assert principal.scopes == {"read", SCOPE, "write"}


@pytest.mark.anyio
async def test_any_tenant_accepted_without_allow_list() -> None:
    token = mint(claims(tid=OTHER_TENANT, iss=issuer(OTHER_TENANT)))
    assert (await make_verifier().verify(token)).tid == OTHER_TENANT


@pytest.mark.anyio
async def test_allow_listed_tenant_accepted() -> None:
    verifier = make_verifier(allowed_tenants=(TENANT,))
    assert (await verifier.verify(mint())).tid == TENANT


@pytest.mark.anyio
async def test_expiry_within_leeway_is_accepted() -> None:
    principal = await make_verifier().verify(mint(claims(exp=int(NOW) - 30)))
    assert principal.expires_at == NOW - 30


@pytest.mark.anyio
async def test_not_before_within_leeway_is_accepted() -> None:
    principal = await make_verifier().verify(mint(claims(nbf=int(NOW) + 30)))
    assert principal.oid == OID


@pytest.mark.anyio
async def test_missing_nbf_and_iat_are_accepted() -> None:
    principal = await make_verifier().verify(mint(claims(nbf=None, iat=None)))
    assert principal.oid == OID


# --- time ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_expired_token_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(exp=int(NOW) - 120)), "expired")


@pytest.mark.anyio
async def test_token_not_valid_yet_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(nbf=int(NOW) + 120)), "not valid yet")


@pytest.mark.anyio
async def test_missing_exp_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(exp=None)), "expiry")


@pytest.mark.anyio
async def test_non_numeric_exp_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(exp="tomorrow")), "expiry")


@pytest.mark.anyio
async def test_infinite_exp_is_refused() -> None:
    # Python's JSON parser accepts Infinity; it must not make a token live forever.
    await assert_invalid(make_verifier(), mint(claims(exp=float("inf"))), "expiry")


# --- audience, issuer, tenant -------------------------------------------------------------------


@pytest.mark.anyio
async def test_wrong_audience_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(aud="api://another-app")), "audience")


@pytest.mark.anyio
async def test_missing_audience_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(aud=None)), "audience")


@pytest.mark.anyio
async def test_issuer_of_another_tenant_is_refused() -> None:
    token = mint(claims(tid=OTHER_TENANT, iss=issuer(TENANT)))
    await assert_invalid(make_verifier(), token, "issuer")


@pytest.mark.anyio
async def test_foreign_issuer_is_refused() -> None:
    token = mint(claims(iss=f"https://evil.invalid/{TENANT}/v2.0"))
    await assert_invalid(make_verifier(), token, "issuer")


@pytest.mark.anyio
async def test_tenant_not_in_allow_list_is_refused() -> None:
    token = mint(claims(tid=OTHER_TENANT, iss=issuer(OTHER_TENANT)))
    await assert_invalid(make_verifier(allowed_tenants=(TENANT,)), token, "tenant is not allowed")


# --- algorithm and signature --------------------------------------------------------------------


@pytest.mark.anyio
async def test_alg_none_is_refused_before_key_lookup() -> None:
    keys = CountingKeys()
    token = f"{b64json({'alg': 'none', 'typ': 'JWT', 'kid': KID})}.{b64json(claims())}."
    await assert_invalid(make_verifier(keys=keys), token, "rs256")
    assert keys.calls == 0


@pytest.mark.anyio
async def test_hs256_with_public_key_as_secret_is_refused() -> None:
    keys = CountingKeys()
    secret = (
        signing_key()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    signing_input = f"{b64json({'alg': 'HS256', 'typ': 'JWT', 'kid': KID})}.{b64json(claims())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    token = f"{signing_input}.{b64url(signature)}"
    await assert_invalid(make_verifier(keys=keys), token, "rs256")
    assert keys.calls == 0


@pytest.mark.anyio
async def test_signature_by_another_key_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(key=other_key()), "signature")


@pytest.mark.anyio
async def test_unknown_kid_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(kid="no-such-key"), "signing key is not known")


@pytest.mark.anyio
async def test_missing_kid_is_refused() -> None:
    token = jwt.encode(claims(), signing_key(), algorithm="RS256")
    await assert_invalid(make_verifier(), token, "signing key is not known")


@pytest.mark.anyio
async def test_tampered_payload_is_refused() -> None:
    header, _, signature = mint().split(".")
    forged = f"{header}.{b64json(claims(oid='55555555-5555-4555-8555-555555555555'))}.{signature}"
    await assert_invalid(make_verifier(), forged, "signature")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "token",
    [
        "",
        "abc",
        "a.b.c",
        "!!!.@@@.###",
        "eyJhbGciOiJSUzI1NiJ9.%%%%.%%%%",
        "Zm9v.YmFy.YmF6",  # base64 that is not JSON
        "x" * 20_000,
    ],
    ids=["empty", "one-part", "short-parts", "not-base64", "bad-payload", "not-json", "huge"],
)
async def test_malformed_token_is_refused(token: str) -> None:
    await assert_invalid(make_verifier(), token, "malformed")


# --- identity and scope claims ------------------------------------------------------------------


@pytest.mark.anyio
async def test_missing_oid_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(oid=None)), "oid")


@pytest.mark.anyio
async def test_empty_oid_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(oid="")), "oid")


@pytest.mark.anyio
async def test_missing_tid_is_refused() -> None:
    await assert_invalid(make_verifier(), mint(claims(tid=None)), "tid")


@pytest.mark.anyio
async def test_app_only_token_is_refused() -> None:
    token = mint(claims(scp=None, roles=["Conversations.ReadWrite.All"], idtyp="app"))
    await assert_invalid(make_verifier(), token, "app-only access tokens are not accepted")


@pytest.mark.anyio
async def test_missing_scope_is_insufficient_scope() -> None:
    token = mint(claims(scp="some.other.scope"))
    error = await rejected(make_verifier(), token)
    assert (error.status, error.error, error.scope) == (403, "insufficient_scope", SCOPE)


@pytest.mark.anyio
async def test_every_required_scope_is_needed() -> None:
    token = mint(claims(scp="read"))
    error = await rejected(make_verifier(required_scopes=("read", "write")), token)
    assert (error.status, error.error, error.scope) == (403, "insufficient_scope", "read write")


# --- cache --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_second_verify_is_served_from_cache() -> None:
    keys = CountingKeys()
    verifier = make_verifier(keys=keys)
    token = mint()
    first = await verifier.verify(token)
    second = await verifier.verify(token)
    assert first == second
    assert keys.calls == 1


@pytest.mark.anyio
async def test_cached_token_past_expiry_is_refused() -> None:
    keys = CountingKeys()
    clock = Clock()
    verifier = make_verifier(keys=keys, clock=clock)
    token = mint(claims(exp=int(NOW) + 10))
    await verifier.verify(token)
    clock.now = NOW + 10 + 61
    await assert_invalid(verifier, token, "expired")
    assert keys.calls == 2


@pytest.mark.anyio
async def test_failed_verification_is_not_cached() -> None:
    keys = CountingKeys()
    verifier = make_verifier(keys=keys)
    token = mint(claims(aud="api://another-app"))
    for _ in range(2):
        await rejected(verifier, token)
    assert keys.calls == 2


@pytest.mark.anyio
async def test_cache_evicts_oldest_when_full() -> None:
    keys = CountingKeys()
    verifier = make_verifier(keys=keys, cache_size=2)
    tokens = [mint(claims(oid=f"0000000{n}-0000-4000-8000-000000000000")) for n in range(3)]
    for token in tokens:
        await verifier.verify(token)
    assert keys.calls == 3
    await verifier.verify(tokens[2])  # newest: still cached
    await verifier.verify(tokens[1])
    assert keys.calls == 3
    await verifier.verify(tokens[0])  # oldest: was evicted
    assert keys.calls == 4


@pytest.mark.anyio
async def test_cache_size_zero_disables_cache() -> None:
    keys = CountingKeys()
    verifier = make_verifier(keys=keys, cache_size=0)
    token = mint()
    await verifier.verify(token)
    await verifier.verify(token)
    assert keys.calls == 2


# --- construction -------------------------------------------------------------------------------


def test_verifier_needs_an_audience() -> None:
    with pytest.raises(ValueError, match="audience"):
        TokenVerifier(
            keys=StaticKeySource({}),
            issuers_for_tenant=lambda tid: (issuer(tid),),
            audiences=(),
            required_scopes=(SCOPE,),
        )


def test_insufficient_scope_accepts_a_single_string() -> None:
    assert AuthError.insufficient_scope("a b").scope == "a b"
