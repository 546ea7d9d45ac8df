"""An unreadable or read-only data folder stopped start-up saying the database "is not a usable
SQLite database ... restore it from a backup", though the file did not exist and permissions were
the problem. Fixed in 0.4.2: the message names the operation, the path and the cause."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from support.data_folder import DATABASE, refused_start
from support.file_modes import bound_by_file_modes

from app.stores.sqlite import SqliteStore

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def create_database(data_dir: Path) -> None:
    """The database as a server that started and stopped leaves it, made by the same store (in
    this process: only the start-up refused afterwards needs one of its own)."""

    async def open_and_close() -> None:
        await (await SqliteStore.open(data_dir / DATABASE)).aclose()

    asyncio.run(open_and_close())


def test_a_data_folder_under_a_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file, not a folder")
    assert refused_start(tmp_path / "plain" / "data") == (
        f"cannot create the data folder {tmp_path / 'plain' / 'data'}: {tmp_path / 'plain'} is a file, not a "
        "folder: set ANVIL_DATA_DIR to a folder Anvil can write to"
    )


def test_a_data_folder_that_cannot_be_created_says_so_and_where(tmp_path: Path) -> None:
    prefix = bound_by_file_modes()
    (tmp_path / "locked").mkdir(mode=0o500)
    data_dir = tmp_path / "locked" / "data"
    assert refused_start(data_dir, prefix) == (
        f"cannot create the data folder {data_dir}: permission denied: set ANVIL_DATA_DIR to a folder Anvil "
        "can write to"
    )


@pytest.mark.parametrize("folder_mode", [0o500, 0o000], ids=["read-only", "unreadable"])
def test_a_data_folder_anvil_cannot_write_is_named_not_called_a_damaged_database(
    tmp_path: Path, folder_mode: int
) -> None:
    prefix = bound_by_file_modes()
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=folder_mode)
    data_dir.chmod(folder_mode)
    try:
        reason = refused_start(data_dir, prefix)
    finally:
        data_dir.chmod(0o700)
    assert reason == (
        f"the data folder {data_dir} is not writable (cannot create {data_dir / DATABASE}: permission "
        "denied): make it writable by the user Anvil runs as, or set ANVIL_DATA_DIR to a folder Anvil can "
        "write to"
    )
    assert list(data_dir.iterdir()) == []


def test_a_read_only_folder_holding_a_database_is_named_by_the_file_sqlite_would_need(tmp_path: Path) -> None:
    prefix = bound_by_file_modes()
    data_dir = tmp_path / "data"
    create_database(data_dir)
    assert sorted(path.name for path in data_dir.iterdir()) == [DATABASE]
    data_dir.chmod(0o500)
    try:
        reason = refused_start(data_dir, prefix, ANVIL_AUTH_MODE="none")
    finally:
        data_dir.chmod(0o700)
    wal = data_dir / f"{DATABASE}-wal"
    assert reason.startswith(
        f"the data folder {data_dir} is not writable (cannot create {wal}: permission denied)"
    )


@pytest.mark.parametrize("file_mode", [0o400, 0o000], ids=["read-only", "unreadable"])
def test_a_database_anvil_cannot_read_and_write_is_named_with_the_cause(
    tmp_path: Path, file_mode: int
) -> None:
    prefix = bound_by_file_modes()
    data_dir = tmp_path / "data"
    create_database(data_dir)
    (data_dir / DATABASE).chmod(file_mode)
    assert refused_start(data_dir, prefix, ANVIL_AUTH_MODE="none") == (
        f"cannot open {data_dir / DATABASE} to read and write it (permission denied): run Anvil as the user "
        "who owns it, or give that user read and write access to it"
    )
