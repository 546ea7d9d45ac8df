"""`anvil serve` created the data folder 0755 and `conversations.sqlite3` 0644 under the usual
umask 022, so every local user could read every conversation. Fixed in 0.4.2: everything under
the data folder is private to its user whatever the umask (folders 0700, files 0600), and an
existing path open to others is named at start-up."""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.data_folder import DATABASE, ask, messages, mode, serving

from app.auth.dev import KEY_FILE_NAME, DevIssuer
from app.private_files import private_file
from app.stores.sqlite import SqliteStore

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def create_database(data_dir: Path) -> None:
    """The database as a server that started and stopped leaves it, made by the same store."""

    async def open_and_close() -> None:
        await (await SqliteStore.open(data_dir / DATABASE)).aclose()

    asyncio.run(open_and_close())


def test_everything_written_under_umask_022_is_private_to_its_user(tmp_path: Path) -> None:
    data_dir = tmp_path / "new" / "data"
    with serving(data_dir, tmp_path / "server.log") as server:
        ask(server)  # the database has written through its WAL
        written = {path.name: mode(path) for path in data_dir.iterdir()}
        folders = {str(path): mode(path) for path in (tmp_path / "new", data_dir)}
    assert folders == {str(tmp_path / "new"): 0o700, str(data_dir): 0o700}
    assert written == {
        DATABASE: 0o600,
        f"{DATABASE}-wal": 0o600,
        f"{DATABASE}-shm": 0o600,
        KEY_FILE_NAME: 0o600,
    }
    assert not [m for m in messages(server.log()) if "other users" in m]


def test_the_dev_key_alone_makes_a_private_folder_with_the_memory_store(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with serving(data_dir, tmp_path / "server.log", ANVIL_STORE="memory") as server:
        ask(server)
    assert mode(data_dir) == 0o700
    assert {path.name: mode(path) for path in data_dir.iterdir()} == {KEY_FILE_NAME: 0o600}


def test_a_folder_and_files_left_open_to_others_are_named_at_start_up_and_left_as_they_are(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    # The folder and files a first start makes, made by the same code in this process: only the
    # start that must name them needs a server of its own.
    DevIssuer.load_or_create(data_dir)
    create_database(data_dir)
    opened = {data_dir: 0o755, data_dir / DATABASE: 0o644, data_dir / KEY_FILE_NAME: 0o640}
    for path, wide in opened.items():
        path.chmod(wide)

    with serving(data_dir, tmp_path / "second.log") as server:
        ask(server)
        warned = [m for m in messages(server.log()) if "other users" in m]
    folder, database, key = (shlex.quote(str(path)) for path in opened)
    assert warned == [
        f"the folder {data_dir} can be read by other users (mode 0755): run `chmod 700 {folder}` so that "
        "only its owner can",
        f"the file {data_dir / DATABASE} can be read by other users (mode 0644): run `chmod 600 {database}` "
        "so that only its owner can",
        f"the file {data_dir / KEY_FILE_NAME} can be read by other users (mode 0640): run `chmod 600 {key}` "
        "so that only its owner can",
    ]
    assert {path: mode(path) for path in opened} == opened


# --- the same, for each file and folder made by `app.private_files` -------------------------


@pytest.fixture(params=[0o000, 0o022, 0o077, 0o277], ids=lambda umask: f"umask {umask:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    before = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(before)


def test_folders_are_0700_and_files_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "a" / "b" / "file"

    assert private_file(path) is True

    assert (mode(tmp_path / "a"), mode(tmp_path / "a" / "b"), mode(path)) == (0o700, 0o700, 0o600)
