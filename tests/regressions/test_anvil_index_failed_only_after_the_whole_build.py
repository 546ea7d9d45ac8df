"""`anvil index` into a read-only or full target read every document and embedded every passage
(40 s of it) before it failed, with a raw errno line: `[Errno 30] Read-only file system:
'.../.x.anvilidx.e3fm0l66.part'`. Found by a hostile run on 0.5.0; fixed in 0.6.0: the target is
checked before any source is read (a file: its folder takes a new file and has room for the
documents; a blob: its container exists and the identity may write there), and a target that
cannot be written is refused in one line saying what to change.

Each source folder holds a document that is not UTF-8: reading it would warn, so a refusal that
does not warn was made before the sources were read."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.anvil_server import TEST_DEFAULTS, anvil_command
from support.anvil_server import anvil_run as anvil
from support.azurite import Azurite
from support.small_disk import on_a_disk

CONNECTION = "AZURE_STORAGE_CONNECTION_STRING"


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "tides.md").write_text("# Tides\n\n" + "The tide turns twice a day. " * 10_000 + "\n")
    (folder / "latin1.md").write_bytes(b"# Caf\xe9\n\nOpen late.\n")
    return folder


def index_on_a_disk(docs: Path, disk: Path, options: str) -> subprocess.CompletedProcess[str]:
    disk.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")} | TEST_DEFAULTS
    command = [
        *on_a_disk(disk, options),
        *anvil_command(),
        "index",
        str(docs),
        "--output",
        str(disk / "x.anvilidx"),
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)


def refused_before_reading(ran: subprocess.CompletedProcess[str], said: str) -> None:
    assert ran.returncode == 1, ran.stderr
    assert ran.stderr.splitlines() == [f"anvil: cannot index: {said}"]


def test_a_read_only_target_is_refused_before_any_document_is_read(docs: Path, tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    ran = index_on_a_disk(docs, disk, "ro")
    refused_before_reading(
        ran,
        f"cannot write {disk / 'x.anvilidx'}: {disk} is on a read-only file system: "
        "give --output on a writable one",
    )


def test_a_target_without_room_for_the_documents_is_refused_before_any_is_read(
    docs: Path, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    ran = index_on_a_disk(docs, disk, "size=64k")
    refused_before_reading(
        ran,
        f"cannot write {disk / 'x.anvilidx'} in {disk}: it has 0.1 MB free, less than the 0.3 MB of the "
        "documents to index: free some space there, or give --output on another disk",
    )


def test_a_blob_in_a_container_that_does_not_exist_is_refused_before_any_document_is_read(
    docs: Path, azurite: Azurite
) -> None:
    url = azurite.url("missing", "docs.anvilidx")
    ran = anvil("index", str(docs), "--output", url, **{CONNECTION: azurite.connection_string()})
    refused_before_reading(
        ran,
        f"{url}: there is no container 'missing' in {azurite.account_url}: create it, or give a URL in a "
        "container that exists",
    )


def test_a_blob_the_identity_may_not_write_is_refused_before_any_document_is_read(
    docs: Path, azurite: Azurite
) -> None:
    url = azurite.url("indexes", "refused.anvilidx")
    wrong = azurite.connection_string(key="d3Jvbmcta2V5LW5vdC10aGUtYWNjb3VudHMta2V5LXRoaXMtaXM=")
    ran = anvil("index", str(docs), "--output", url, **{CONNECTION: wrong})
    assert ran.returncode == 1 and len(ran.stderr.splitlines()) == 1, ran.stderr
    assert ran.stderr.startswith(f"anvil: cannot index: access to {url} was refused (")
    assert f"the account key in {CONNECTION} is not accepted" in ran.stderr
