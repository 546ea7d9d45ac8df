"""The dev key pair and the dev tokens it signs: Entra-shaped v2 access tokens, RS256.

The key lives in the data folder, so every process sharing that folder (the server, which
verifies with it in `app.auth.dev`; `anvil token`; the client commands facing a dev server on
this machine) mints and accepts the same tokens. This module imports nothing of the server or the
client, so both can use it. Only `DevKey.load_or_create` ever creates a key: the client reads one
with `DevKey.existing`, since a folder without a key is not the folder any running dev server uses.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.private_files import describe, private_folder, reason

DEV_AUTHORITY = "https://login.anvil.invalid"
DEV_TENANT_ID = "5d1f0c7e-3b9a-4e62-8f41-a0d7c2b6e913"
DEV_CLIENT_ID = "b8e2a4c1-6f07-4d3b-9c5e-71f0d8a2c346"
DEV_SCOPE = "access_as_user"
DEV_KID = "anvil-dev-1"

KEY_FILE_NAME = "dev-signing-key.pem"
#: Longest lifetime a dev token gets: it is a bearer secret, and one valid for years outlives any
#: reason to hold it (`anvil token --ttl` refuses more).
MAX_TTL_SECONDS = 30 * 86_400

# Fixed so that a user name maps to the same oid in every tenant, process and run.
_USER_NAMESPACE = uuid.UUID("1f6b2c8e-0a4d-4f7b-b3e5-9d2a6c0e8f14")
_USER_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_USE_ANOTHER_FOLDER = "set ANVIL_DATA_DIR to a folder Anvil can write to"


class DevKey:
    """One RSA key that mints dev access tokens."""

    def __init__(self, private_key: rsa.RSAPrivateKey, *, kid: str = DEV_KID) -> None:
        self._private_key = private_key
        self.kid = kid

    @classmethod
    def load_or_create(cls, data_dir: Path, *, verify_only: bool = False) -> Self:
        """Use the signing key in `data_dir`, creating the dir (0700) and an RSA-2048 key (0600)
        if needed.

        `verify_only`: the caller only verifies tokens, with the public half, so the private
        key's consistency check (~50 ms, a guard for signing with a damaged key) is skipped.

        Raises `ValueError`, in one line naming the path and what to do, when the folder or the
        key cannot be created or read, or the file holds no usable key.
        """
        path = data_dir / KEY_FILE_NAME
        try:
            private_folder(data_dir)
        except OSError as error:
            raise ValueError(
                f"{describe(error, 'create the data folder', data_dir)}: {_USE_ANOTHER_FOLDER}"
            ) from None
        try:
            if not path.exists():
                _write_new_key(path)
        except OSError as error:
            raise ValueError(
                f"cannot create the dev signing key {path} ({reason(error)}): make {data_dir} "
                f"writable by the user Anvil runs as, or {_USE_ANOTHER_FOLDER}"
            ) from None
        return cls._read(path, check=not verify_only)

    @classmethod
    def existing(cls, data_dir: Path) -> Self | None:
        """The signing key in `data_dir`, or None when it holds none; never creates anything.

        Raises `ValueError` as `load_or_create` does when the key cannot be read or used.
        """
        path = data_dir / KEY_FILE_NAME
        if not path.exists():
            return None
        return cls._read(path, check=True)

    @classmethod
    def _read(cls, path: Path, *, check: bool) -> Self:
        try:
            pem = path.read_bytes()
        except OSError as error:
            raise ValueError(
                f"cannot read the dev signing key {path} ({reason(error)}): run Anvil as the user "
                "who owns it, or move it away so that a new key is created"
            ) from None
        return cls(_read_key(pem, path, check=check))

    @property
    def public_key(self) -> rsa.RSAPublicKey:
        """The public half of the signing key."""
        return self._private_key.public_key()

    def issuer(self, tid: str) -> str:
        """The `iss` this key's tokens carry (and the verifier expects) for tenant `tid`."""
        return f"{DEV_AUTHORITY}/{tid}/v2.0"

    def mint(
        self,
        user: str,
        *,
        tenant: str | None = None,
        scopes: Sequence[str] = (DEV_SCOPE,),
        ttl: int = 3600,
        now: float | None = None,
    ) -> str:
        """Mint a delegated v2 access token for `user` valid for `ttl` seconds from `now`."""
        _check_user(user)
        if isinstance(scopes, str):
            raise ValueError("scopes must be a sequence of scope names, not one string.")
        if any(not scope or scope.split() != [scope] for scope in scopes):
            raise ValueError("Each scope must be a non-empty name without spaces.")
        tid = DEV_TENANT_ID if tenant is None else tenant
        if not tid.strip():
            raise ValueError("tenant must not be empty.")
        if isinstance(ttl, bool) or not 1 <= ttl <= MAX_TTL_SECONDS:
            raise ValueError(f"ttl must be from 1 second to 30 days ({MAX_TTL_SECONDS} s), not {ttl!r}.")
        issued_at = int(time.time() if now is None else now)
        return self.mint_claims(
            {
                "aud": DEV_CLIENT_ID,
                "iss": self.issuer(tid),
                "iat": issued_at,
                "nbf": issued_at,
                "exp": issued_at + ttl,
                "oid": user_oid(user),
                "tid": tid,
                # Entra's sub is pairwise per app and tenant; mirror that so nobody mistakes it
                # for the user's identity (which is oid + tid).
                "sub": str(uuid.uuid5(_USER_NAMESPACE, f"sub:{tid}:{user}")),
                "scp": " ".join(scopes),
                "name": user,
                "preferred_username": f"{user}@anvil.invalid",
                "azp": DEV_CLIENT_ID,
                "ver": "2.0",
            }
        )

    def mint_claims(self, claims: Mapping[str, Any], headers: Mapping[str, Any] | None = None) -> str:
        """Sign arbitrary `claims` with RS256 and this key's kid (for tests needing odd tokens).

        `headers` are added to, and may override, the default `kid`/`typ` header.
        """
        header: dict[str, Any] = {"kid": self.kid, "typ": "JWT", **(headers or {})}
        return jwt.encode(dict(claims), self._private_key, algorithm="RS256", headers=header)


def user_oid(user: str) -> str:
    """The dev `oid` for `user`: the same in every tenant, different for every user name."""
    _check_user(user)
    return str(uuid.uuid5(_USER_NAMESPACE, user))


def _check_user(user: str) -> None:
    if not isinstance(user, str) or _USER_NAME.fullmatch(user) is None:
        raise ValueError("A dev user name must be 1-64 characters of letters, digits, '.', '_', '-' or '@'.")


def _write_new_key(path: Path) -> None:
    """Create `path` with a fresh key, atomically and without replacing a key written meanwhile."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".dev-signing-key-", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as file:
            # mkstemp already creates the file 0600; be explicit, the key must stay private.
            os.chmod(tmp, 0o600)
            file.write(pem)
            file.flush()
            os.fsync(file.fileno())
        # A hard link, unlike a rename, fails if another process created the key first;
        # then both use that one and their tokens stay interchangeable.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_key(pem: bytes, path: Path, *, check: bool = True) -> rsa.RSAPrivateKey:
    """The key `pem` (read from `path`); `ValueError` naming `path` and what to do if it is none."""
    try:
        key = serialization.load_pem_private_key(pem, password=None, unsafe_skip_rsa_key_validation=not check)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        # The library's own message ("Could not deserialize key data...") names no file.
        key = None
    if not isinstance(key, rsa.RSAPrivateKey) or key.key_size < 2048:
        raise ValueError(
            f"the dev signing key {path} is not an unencrypted PEM RSA private key of at least 2048 "
            "bits: restore it, or move it away so that a new one is created (tokens signed with "
            "the old key are then refused)"
        )
    return key
