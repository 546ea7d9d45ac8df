"""An index in Blob Storage, end to end against Azurite with the real SDK: `anvil index` uploads
it, `anvil serve` serves it (ANVIL_INDEX a blob URL), notices a new upload by its ETag and swaps
to it, and keeps serving when a damaged one is uploaded."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from support.anvil_server import AnvilServer, run_anvil
from support.anvil_server import anvil_run as anvil
from support.azurite import Azurite, storage_secrets

CONNECTION = "AZURE_STORAGE_CONNECTION_STRING"


def folder(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "page.md").write_text(f"# Page\n\n{text}\n")
    return path


def index_version(server: AnvilServer) -> str:
    return str(httpx.get(f"{server.url}/readyz", timeout=10).json()["index"]["version"])


def answer(server: AnvilServer, question: str) -> str:
    response = httpx.post(
        f"{server.url}/api/ask",
        json={"question": question},
        headers={"Authorization": f"Bearer {server.token('reader')}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return str(response.json()["answer"])


def test_an_index_uploaded_to_blob_storage_is_served_and_replaced_without_a_restart(
    azurite: Azurite, tmp_path: Path
) -> None:
    url = azurite.url("indexes", "team/docs.anvilidx")
    storage = {CONNECTION: azurite.connection_string()}
    first = anvil(
        "index", str(folder(tmp_path, "v1", "The tide turns twice a day.")), "--output", url, **storage
    )
    assert first.returncode == 0, first.stderr
    assert f"into {url}: version " in first.stderr
    env = {**storage, "ANVIL_INDEX": url, "ANVIL_INDEX_REFRESH_SECONDS": "0.1"}
    with run_anvil(tmp_path / "data", env) as server:
        assert "tide" in answer(server, "How often does the tide turn?")
        before = index_version(server)
        second = anvil(
            "index",
            str(folder(tmp_path, "v2", "Monsoon winds turn with the seasons.")),
            "--output",
            url,
            **storage,
        )
        assert second.returncode == 0, second.stderr
        version = second.stderr.split("version ", 1)[1].split(",", 1)[0]
        deadline = time.monotonic() + 30
        while index_version(server) != version:  # polled: the replica looks every 0.1 s
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        assert version != before and "Monsoon" in answer(server, "When do monsoon winds turn?")

        from azure.storage.blob import BlobClient

        with BlobClient.from_connection_string(
            azurite.connection_string(), "indexes", "team/docs.anvilidx"
        ) as blob:
            blob.upload_blob(b"ANVILIDX" + b"\0" * 40, overwrite=True)
        deadline = time.monotonic() + 30
        while "kept serving version" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        assert index_version(server) == version and "Monsoon" in answer(server, "When do monsoon winds turn?")
    assert f"index: kept serving version {version}: {url}" in server.log()
    assert storage_secrets(server.log()) == []


def test_a_blob_that_is_not_there_stops_start_up_with_what_to_do(azurite: Azurite, tmp_path: Path) -> None:
    from support.anvil_server import free_port

    url = azurite.url("indexes", "nothing/here.anvilidx")
    ran = anvil(
        "serve",
        **{CONNECTION: azurite.connection_string()},
        ANVIL_INDEX=url,
        ANVIL_DATA_DIR=str(tmp_path / "data"),
        ANVIL_PORT=str(free_port()),
    )
    assert ran.returncode != 0 and "Traceback" not in ran.stdout + ran.stderr
    assert f"ANVIL_INDEX: cannot open {url}: no blob at {url}" in ran.stdout + ran.stderr


def test_documents_under_a_blob_prefix_are_indexed_as_a_folder_would_be(
    azurite: Azurite, tmp_path: Path
) -> None:
    from azure.storage.blob import ContainerClient

    documents = {
        "team/guide/install.md": b"# Installing\n\nRun the installer, then restart the agent.\n",
        "team/reference/flags.html": (
            b"<html><nav>Menu</nav><h1>Flags</h1><p>The verbose flag logs more.</p></html>"
        ),
        "team/notes/legacy.md": b"\xff\xfe not text",
        "team/notes/huge.md": b"# Huge\n\n" + b"A generated page. " * 12_000,
        "elsewhere/other.md": b"# Other\n\nNot under the prefix.\n",
    }
    with ContainerClient.from_connection_string(azurite.connection_string(), "docs") as container:
        for name, data in documents.items():
            container.upload_blob(name, data, overwrite=True)
    target = tmp_path / "team.anvilidx"
    prefix = azurite.url("docs", "team")
    ran = anvil(
        "index",
        prefix,
        "--output",
        str(target),
        **{CONNECTION: azurite.connection_string()},
        ANVIL_MAX_DOCUMENT_BYTES="100000",
    )
    assert ran.returncode == 0, ran.stderr
    assert "indexed 2 files" in ran.stderr
    assert f"corpus: skipped {prefix}/notes/legacy.md: it is not UTF-8 text" in ran.stderr
    assert (
        f"corpus: skipped {prefix}/notes/huge.md: it is 0.2 MB, more than ANVIL_MAX_DOCUMENT_BYTES (0.1 MB): "
        "split it, or raise ANVIL_MAX_DOCUMENT_BYTES"
    ) in ran.stderr

    from app.knowledge.index import PassageIndex

    index = PassageIndex.open(target)
    assert sorted(index.documents) == ["guide/install.md", "reference/flags.html"]
    flags = index.file("reference/flags.html")
    assert flags is not None and "verbose flag" in flags.text and "Menu" not in flags.text
