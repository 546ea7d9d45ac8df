"""Why the SQLite store cannot open, said as what it is: only a damaged file is sent to a backup."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.stores.sqlite import BUSY_TIMEOUT, SqliteStore, StartupError

pytestmark = pytest.mark.anyio


async def test_a_database_another_process_keeps_locked_is_named_as_locked_not_damaged(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    await (await SqliteStore.open(path)).aclose()
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")  # the write lock, held past the store's busy timeout
        with pytest.raises(StartupError) as refused:
            await SqliteStore.open(path)
        other.execute("ROLLBACK")
    assert str(refused.value) == (
        f"{path} stayed locked by another process for {BUSY_TIMEOUT:g} s (database is locked): stop the "
        "process that holds it, or start again once it is done"
    )
    await (await SqliteStore.open(path)).aclose()  # and once it is released, it opens


async def test_a_folder_where_the_database_should_be_is_not_called_damaged(tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    path.mkdir()
    with pytest.raises(StartupError) as refused:
        await SqliteStore.open(path)
    assert str(refused.value).startswith(f"SQLite cannot read and write {path} (")
    assert "backup" not in str(refused.value)
