"""A malformed dev signing key stopped start-up with a PEM error that named neither the file nor
what to do about it. Fixed in 0.4.2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.data_folder import refused_start
from support.file_modes import bound_by_file_modes

from app.auth.dev import KEY_FILE_NAME, DevIssuer

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def test_a_malformed_dev_key_is_refused_naming_its_path_and_what_to_do(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / KEY_FILE_NAME).write_text("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n")
    assert refused_start(data_dir, ANVIL_STORE="memory") == (
        f"the dev signing key {data_dir / KEY_FILE_NAME} is not an unencrypted PEM RSA private key of at "
        "least 2048 bits: restore it, or move it away so that a new one is created (tokens signed with the "
        "old key are then refused)"
    )


def test_a_dev_key_anvil_cannot_read_is_refused_with_the_cause(tmp_path: Path) -> None:
    prefix = bound_by_file_modes()
    data_dir = tmp_path / "data"
    # The key a first start would have made, made by the same code (only the start-up refused
    # afterwards needs a process of its own).
    DevIssuer.load_or_create(data_dir)
    (data_dir / KEY_FILE_NAME).chmod(0)
    assert refused_start(data_dir, prefix, ANVIL_STORE="memory") == (
        f"cannot read the dev signing key {data_dir / KEY_FILE_NAME} (permission denied): run Anvil as the "
        "user who owns it, or move it away so that a new key is created"
    )
