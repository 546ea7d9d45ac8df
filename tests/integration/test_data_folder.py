"""The data folder of a real `anvil serve`: private to its user whatever the umask, an existing
one open to others named at start-up, and a folder or file it cannot use refused in one line
that names the cause and the path (exit 3)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from support.anvil_server import AnvilServer, anvil_command, free_port, stop, wait_until_ready
from support.file_modes import bound_by_file_modes

from app.auth.dev import KEY_FILE_NAME

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")

DATABASE = "conversations.sqlite3"
RUN_TIMEOUT = 60


def environment(data_dir: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    return env | {"ANVIL_DATA_DIR": str(data_dir), "ANVIL_ANSWER_ENGINE": "echo", **settings}


@contextmanager
def serving(data_dir: Path, log_path: Path, **settings: str) -> Iterator[AnvilServer]:
    """`anvil serve` under umask 022 (its log kept outside the data folder), ready, then reaped."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*anvil_command(), "serve"],
            env=environment(data_dir, ANVIL_PORT=str(port), **settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            umask=0o022,
        )
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", process, log_path)
        yield AnvilServer(
            url=f"http://127.0.0.1:{port}", data_dir=data_dir, log_path=log_path, process=process
        )
    finally:
        stop(process)


def refused_start(data_dir: Path, prefix: Sequence[str] = (), **settings: str) -> str:
    """The one `Anvil cannot start: ...` message of an `anvil serve` that must not start (exit 3)."""
    ran = subprocess.run(
        [*prefix, *anvil_command(), "serve"],
        env=environment(data_dir, ANVIL_PORT=str(free_port()), **settings),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        umask=0o022,
    )
    output = ran.stdout + ran.stderr
    assert ran.returncode == 3, output
    assert "Traceback" not in output
    assert "not a usable SQLite database" not in output
    (reason,) = [m for m in messages(output) if "Anvil cannot start" in m]
    return reason.split("Anvil cannot start: ", 1)[1]


def messages(log: str) -> list[str]:
    return [json.loads(line)["message"] for line in log.splitlines() if line.strip()]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def ask(server: AnvilServer) -> None:
    headers = {"Authorization": f"Bearer {server.token('owner')}"}
    answered = httpx.post(
        f"{server.url}/api/ask", json={"question": "q", "conversationId": "c-1"}, headers=headers
    )
    assert answered.status_code == 200, answered.text


# --- private whatever the umask --------------------------------------------------------------


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
    with serving(data_dir, tmp_path / "first.log") as server:
        ask(server)
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


# --- a data folder that cannot be used -------------------------------------------------------


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
    with serving(data_dir, tmp_path / "server.log", ANVIL_STORE="sqlite", ANVIL_AUTH_MODE="none"):
        pass
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
    with serving(data_dir, tmp_path / "server.log", ANVIL_AUTH_MODE="none"):
        pass
    (data_dir / DATABASE).chmod(file_mode)
    assert refused_start(data_dir, prefix, ANVIL_AUTH_MODE="none") == (
        f"cannot open {data_dir / DATABASE} to read and write it (permission denied): run Anvil as the user "
        "who owns it, or give that user read and write access to it"
    )


# --- the dev signing key ---------------------------------------------------------------------


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
    with serving(data_dir, tmp_path / "server.log", ANVIL_STORE="memory"):
        pass
    (data_dir / KEY_FILE_NAME).chmod(0)
    assert refused_start(data_dir, prefix, ANVIL_STORE="memory") == (
        f"cannot read the dev signing key {data_dir / KEY_FILE_NAME} (permission denied): run Anvil as the "
        "user who owns it, or move it away so that a new key is created"
    )
