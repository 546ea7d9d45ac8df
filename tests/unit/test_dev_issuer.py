"""DevIssuer: the signing key on disk, the shape of minted tokens, and their verification."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.auth.dev import (
    DEV_AUTHORITY,
    DEV_CLIENT_ID,
    DEV_KID,
    DEV_SCOPE,
    DEV_TENANT_ID,
    KEY_FILE_NAME,
    DevIssuer,
)
from app.errors import AuthError

NOW = 1_700_000_000.0
OTHER_TENANT = "22222222-2222-4222-8222-222222222222"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> DevIssuer:
    """One issuer per module: RSA key generation is slow."""
    return DevIssuer.load_or_create(tmp_path_factory.mktemp("dev-issuer"))


def fixed_clock() -> float:
    return NOW


# --- the key on disk ----------------------------------------------------------------------------


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_key_file_is_created_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "nested" / "data"
    DevIssuer.load_or_create(data_dir)
    key_file = data_dir / KEY_FILE_NAME
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert sorted(path.name for path in data_dir.iterdir()) == [KEY_FILE_NAME]  # no temp files


@pytest.mark.anyio
async def test_key_is_reused_across_loads(tmp_path: Path) -> None:
    first = DevIssuer.load_or_create(tmp_path)
    content = (tmp_path / KEY_FILE_NAME).read_bytes()
    second = DevIssuer.load_or_create(tmp_path)
    assert (tmp_path / KEY_FILE_NAME).read_bytes() == content
    principal = await second.verifier(clock=fixed_clock).verify(first.mint("alice", now=NOW))
    assert principal.name == "alice"


def pem(key: rsa.RSAPrivateKey, encryption: serialization.KeySerializationEncryption) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


@pytest.mark.parametrize("verify_only", [False, True])
@pytest.mark.parametrize(
    "content",
    [
        lambda: b"not a key",
        lambda: b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
        lambda: pem(rsa.generate_private_key(65537, 2048), serialization.BestAvailableEncryption(b"pw")),
        lambda: pem(rsa.generate_private_key(65537, 1024), serialization.NoEncryption()),
    ],
    ids=["text", "bad PEM", "encrypted", "1024 bits"],
)
def test_key_file_that_is_not_a_usable_key_is_refused_naming_it_and_what_to_do(
    tmp_path: Path, verify_only: bool, content: Callable[[], bytes]
) -> None:
    (tmp_path / KEY_FILE_NAME).write_bytes(content())
    with pytest.raises(ValueError) as refused:
        DevIssuer.load_or_create(tmp_path, verify_only=verify_only)
    assert str(refused.value) == (
        f"the dev signing key {tmp_path / KEY_FILE_NAME} is not an unencrypted PEM RSA private key of at "
        "least 2048 bits: restore it, or move it away so that a new one is created (tokens signed with the "
        "old key are then refused)"
    )


def test_a_data_folder_under_a_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(ValueError) as refused:
        DevIssuer.load_or_create(tmp_path / "plain" / "data")
    assert str(refused.value) == (
        f"cannot create the data folder {tmp_path / 'plain' / 'data'}: {tmp_path / 'plain'} is a file, not a "
        "folder: set ANVIL_DATA_DIR to a folder Anvil can write to"
    )


@pytest.mark.anyio
async def test_a_server_loading_the_key_to_verify_accepts_what_the_cli_mints(tmp_path: Path) -> None:
    signer = DevIssuer.load_or_create(tmp_path)
    server = DevIssuer.load_or_create(tmp_path, verify_only=True)
    principal = await server.verifier(clock=fixed_clock).verify(signer.mint("alice", now=NOW))
    assert principal.name == "alice"


# --- minted tokens ------------------------------------------------------------------------------


def test_minted_token_has_entra_v2_shape(issuer: DevIssuer) -> None:
    token = issuer.mint("alice", scopes=(DEV_SCOPE, "extra"), ttl=600, now=NOW)
    header = jwt.get_unverified_header(token)
    assert (header["alg"], header["kid"]) == ("RS256", DEV_KID)
    claims = jwt.decode(
        token,
        issuer.public_key,
        algorithms=["RS256"],
        options={"verify_exp": False, "verify_aud": False, "verify_iat": False, "verify_nbf": False},
    )
    assert set(claims) == {
        "aud", "iss", "iat", "nbf", "exp", "oid", "tid", "sub", "scp",
        "name", "preferred_username", "azp", "ver",
    }  # fmt: skip
    assert claims["aud"] == claims["azp"] == DEV_CLIENT_ID
    assert claims["iss"] == f"{DEV_AUTHORITY}/{DEV_TENANT_ID}/v2.0"
    assert claims["tid"] == DEV_TENANT_ID
    assert (claims["iat"], claims["nbf"], claims["exp"]) == (NOW, NOW, NOW + 600)
    assert claims["scp"] == f"{DEV_SCOPE} extra"
    assert (claims["name"], claims["preferred_username"]) == ("alice", "alice@anvil.invalid")
    assert claims["ver"] == "2.0"


def test_oid_is_the_same_in_every_tenant(issuer: DevIssuer) -> None:
    home = jwt.decode(issuer.mint("alice"), options={"verify_signature": False})
    away = jwt.decode(issuer.mint("alice", tenant=OTHER_TENANT), options={"verify_signature": False})
    assert home["oid"] == away["oid"]
    assert (home["tid"], away["tid"]) == (DEV_TENANT_ID, OTHER_TENANT)


def test_oid_differs_between_users(issuer: DevIssuer) -> None:
    alice = jwt.decode(issuer.mint("alice"), options={"verify_signature": False})
    bob = jwt.decode(issuer.mint("bob"), options={"verify_signature": False})
    assert alice["oid"] != bob["oid"]


@pytest.mark.parametrize(
    "user",
    ["", "a" * 65, "with space", "slash/name", "ünïcode", "new\nline"],
    ids=["empty", "too-long", "space", "slash", "non-ascii", "newline"],
)
def test_invalid_user_name_is_refused(issuer: DevIssuer, user: str) -> None:
    with pytest.raises(ValueError, match="1-64 characters"):
        issuer.mint(user)


def test_user_name_of_every_allowed_kind_is_accepted(issuer: DevIssuer) -> None:
    assert issuer.mint("Ada.Lovelace_1-x@lab")
    assert issuer.mint("a" * 64)


def test_scopes_as_one_string_is_refused(issuer: DevIssuer) -> None:
    with pytest.raises(ValueError, match="sequence"):
        issuer.mint("alice", scopes=DEV_SCOPE)


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
