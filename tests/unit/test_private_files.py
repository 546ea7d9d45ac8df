"""Owner-only folders and files: what exists keeps its mode, a link is never opened, failures are
described by path and cause, and paths left open to others are warned about. That new ones are
private whatever the umask is pinned in tests/regressions/test_history_was_readable_by_other_users.py."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from app.private_files import describe, private_file, private_folder, warn_if_open

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_what_exists_keeps_its_mode_unless_narrowing_is_asked(tmp_path: Path) -> None:
    folder, path = tmp_path / "shared", tmp_path / "shared" / "file"
    folder.mkdir()
    folder.chmod(0o755)
    path.write_text("kept")
    path.chmod(0o644)

    private_folder(folder)
    assert private_file(path) is False
    assert (mode(folder), mode(path), path.read_text()) == (0o755, 0o644, "kept")

    assert private_file(path, narrow=True) is False
    assert (mode(path), path.read_text()) == (0o600, "kept")


def test_a_link_in_the_place_of_a_new_file_is_never_opened(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    target.chmod(0o644)
    (tmp_path / "file").symlink_to(target)

    assert private_file(tmp_path / "file") is False
    assert (mode(target), target.read_text()) == (0o644, "untouched")


def test_a_file_where_a_folder_should_be_is_named(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    for path in (tmp_path / "plain", tmp_path / "plain" / "sub"):
        with pytest.raises(FileExistsError) as raised:
            private_folder(path)
        described = describe(raised.value, "create the data folder", path)
        expected = (
            "a file is in its place" if path == tmp_path / "plain" else f"{tmp_path / 'plain'} is a file"
        )
        assert described.startswith(f"cannot create the data folder {path}: {expected}")


def test_describe_names_the_path_that_failed_and_the_cause_in_words(tmp_path: Path) -> None:
    denied = PermissionError(13, "Permission denied", str(tmp_path / "parent"))
    assert describe(denied, "create the data folder", tmp_path / "parent" / "data") == (
        f"cannot create the data folder {tmp_path / 'parent' / 'data'}: creating {tmp_path / 'parent'}: "
        "permission denied"
    )
    read_only = OSError(30, "Read-only file system", str(tmp_path / "db"))
    assert (
        describe(read_only, "create", tmp_path / "db")
        == f"cannot create {tmp_path / 'db'}: read-only file system"
    )


def test_each_path_open_to_others_is_warned_once_with_the_command_that_closes_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, readable, writable, private = (tmp_path / name for name in ("my data", "db", "wal", "key"))
    folder.mkdir(mode=0o711)
    folder.chmod(0o711)
    for path, wide in ((readable, 0o640), (writable, 0o602), (private, 0o600)):
        path.write_text("")
        path.chmod(wide)

    caplog.set_level(logging.WARNING, logger="app.private_files")
    warn_if_open(folder, readable, writable, private, tmp_path / "missing")
    warn_if_open(folder, readable)

    assert [record.getMessage() for record in caplog.records] == [
        f"the folder {folder} can be searched by other users (mode 0711): run `chmod 700 '{folder}'` so that "
        "only its owner can",
        f"the file {readable} can be read by other users (mode 0640): run `chmod 600 {readable}` so that "
        "only its owner can",
        f"the file {writable} can be written by other users (mode 0602): run `chmod 600 {writable}` so that "
        "only its owner can",
    ]
