"""A new index blob whose download was cut by a storage outage was never tried again: the refresh
marked its ETag as seen when the download failed, so 30 s after storage came back the replica
still served the old index, other replicas the new one, and nothing said so. Found by a hostile
run on 0.5.0; fixed in 0.6.0: a failed download is tried again, with a growing wait, until it
succeeds or the blob changes again, and `/readyz` says for how long the replica has been behind
the newest version it has seen (`index.behindSeconds`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from azure.storage.blob import BlobClient
from support.anvil_server import AnvilServer, run_anvil
from support.azurite import ACCOUNT, Azurite
from support.blob_proxy import CUT, PASS, blob_proxy

from app.knowledge.build import Source, build

NAME = "outage/docs.anvilidx"


def uploaded(azurite: Azurite, tmp_path: Path, name: str, text: str) -> str:
    """Build an index of one page saying `text`, upload it, and return its version."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "page.md").write_text(f"# Page\n\n{text}\n")
    built = build([Source(folder)], tmp_path / f"{name}.anvilidx")
    with BlobClient.from_connection_string(azurite.connection_string(), "indexes", NAME) as blob:
        blob.upload_blob((tmp_path / f"{name}.anvilidx").read_bytes(), overwrite=True)
    return built.version


def index(server: AnvilServer) -> dict[str, Any]:
    ready = httpx.get(f"{server.url}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text
    said: dict[str, Any] = ready.json()["index"]
    return said


def test_a_download_cut_by_an_outage_is_tried_again_once_storage_is_back(
    azurite: Azurite, tmp_path: Path
) -> None:
    first = uploaded(azurite, tmp_path, "v1", "The tide turns twice a day.")
    with blob_proxy(azurite.port) as proxy:
        env = {
            "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string(),
            "ANVIL_INDEX": proxy.url(ACCOUNT, "indexes", NAME),
            "ANVIL_INDEX_REFRESH_SECONDS": "0.2",
            "ANVIL_LOG_LEVEL": "info",
        }
        with run_anvil(tmp_path / "data", env) as server:
            proxy.set("GET", CUT)  # the outage: every download is cut; the ETag can still be read
            second = uploaded(azurite, tmp_path, "v2", "Monsoon winds turn with the seasons.")
            proxy.wait_for("GET", CUT, count=4)  # one download, and the storage client's own 3 retries
            during = index(server)
            assert during["version"] == first

            proxy.set("GET", PASS)  # storage is back
            deadline = time.monotonic() + 60
            while (after := index(server))["version"] != second:  # polled: the replica looks every 0.2 s
                assert time.monotonic() < deadline, server.log()
                time.sleep(0.05)
    # While the download could not be made, the replica said it was behind; once made, it is not.
    assert during.get("behindSeconds") is not None and after["behindSeconds"] is None
    assert "index: cannot fetch the new version of" in server.log()
    assert f"index: now serving version {second}" in server.log()
