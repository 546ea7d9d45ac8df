"""The dev key (`app.devkey`): the signing key on disk, created only when asked to, and the shape
of the tokens it mints."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.devkey import (
    DEV_AUTHORITY,
    DEV_CLIENT_ID,
    DEV_KID,
    DEV_SCOPE,
    DEV_TENANT_ID,
    KEY_FILE_NAME,
    DevKey,
)

NOW = 1_700_000_000.0
OTHER_TENANT = "22222222-2222-4222-8222-222222222222"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> DevKey:
    """One key per module: RSA key generation is slow."""
    return DevKey.load_or_create(tmp_path_factory.mktemp("dev-key"))


def verified(token: str, key: DevKey) -> dict[str, object]:
    """The claims of `token`, its signature checked with the public half of `key`."""
    return dict(jwt.decode(token, key.public_key, algorithms=["RS256"], audience=DEV_CLIENT_ID))


# --- the key on disk ----------------------------------------------------------------------------


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_key_file_is_created_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "nested" / "data"
    DevKey.load_or_create(data_dir)
    key_file = data_dir / KEY_FILE_NAME
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert sorted(path.name for path in data_dir.iterdir()) == [KEY_FILE_NAME]  # no temp files


def test_key_is_reused_across_loads(tmp_path: Path) -> None:
    first = DevKey.load_or_create(tmp_path)
    content = (tmp_path / KEY_FILE_NAME).read_bytes()
    second = DevKey.load_or_create(tmp_path)
    assert (tmp_path / KEY_FILE_NAME).read_bytes() == content
    assert verified(first.mint("alice"), second)["name"] == "alice"


def test_an_existing_key_is_read_and_a_missing_one_is_never_created(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    assert DevKey.existing(data_dir) is None
    assert not data_dir.exists()
    created = DevKey.load_or_create(data_dir)
    found = DevKey.existing(data_dir)
    assert found is not None
    assert verified(created.mint("alice"), found)["name"] == "alice"


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
        DevKey.load_or_create(tmp_path, verify_only=verify_only)
    with pytest.raises(ValueError) as refused_when_read:
        DevKey.existing(tmp_path)
    assert str(refused_when_read.value) == str(refused.value)
    assert str(refused.value) == (
        f"the dev signing key {tmp_path / KEY_FILE_NAME} is not an unencrypted PEM RSA private key of at "
        "least 2048 bits: restore it, or move it away so that a new one is created (tokens signed with the "
        "old key are then refused)"
    )


def test_a_data_folder_under_a_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(ValueError) as refused:
        DevKey.load_or_create(tmp_path / "plain" / "data")
    assert str(refused.value) == (
        f"cannot create the data folder {tmp_path / 'plain' / 'data'}: {tmp_path / 'plain'} is a file, not a "
        "folder: set ANVIL_DATA_DIR to a folder Anvil can write to"
    )


# --- minted tokens ------------------------------------------------------------------------------


def test_minted_token_has_entra_v2_shape(issuer: DevKey) -> None:
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


def test_oid_is_the_same_in_every_tenant(issuer: DevKey) -> None:
    home = jwt.decode(issuer.mint("alice"), options={"verify_signature": False})
    away = jwt.decode(issuer.mint("alice", tenant=OTHER_TENANT), options={"verify_signature": False})
    assert home["oid"] == away["oid"]
    assert (home["tid"], away["tid"]) == (DEV_TENANT_ID, OTHER_TENANT)


def test_oid_differs_between_users(issuer: DevKey) -> None:
    alice = jwt.decode(issuer.mint("alice"), options={"verify_signature": False})
    bob = jwt.decode(issuer.mint("bob"), options={"verify_signature": False})
    assert alice["oid"] != bob["oid"]


@pytest.mark.parametrize(
    "user",
    ["", "a" * 65, "with space", "slash/name", "ünïcode", "new\nline"],
    ids=["empty", "too-long", "space", "slash", "non-ascii", "newline"],
)
def test_invalid_user_name_is_refused(issuer: DevKey, user: str) -> None:
    with pytest.raises(ValueError, match="1-64 characters"):
        issuer.mint(user)


def test_user_name_of_every_allowed_kind_is_accepted(issuer: DevKey) -> None:
    assert issuer.mint("Ada.Lovelace_1-x@lab")
    assert issuer.mint("a" * 64)


def test_scopes_as_one_string_is_refused(issuer: DevKey) -> None:
    with pytest.raises(ValueError, match="sequence"):
        issuer.mint("alice", scopes=DEV_SCOPE)
