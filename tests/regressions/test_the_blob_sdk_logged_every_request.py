"""The Azure Blob Storage SDK logged every request at INFO, its URL and headers with it: a replica
looking for a new index every second wrote 42 such records in 20 s. Found by a hostile run on
0.5.0; fixed in 0.6.0: the Azure SDKs' loggers (Blob Storage, identity, Cosmos DB) say warnings
and errors only unless `ANVIL_LOG_LEVEL=debug`, their request logging is off even then, and no
log line holds a SAS signature or a Shared Key."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from azure.storage.blob import BlobClient
from support.anvil_server import run_anvil
from support.azurite import Azurite, storage_secrets

from app.knowledge.build import Source, build


def uploaded(azurite: Azurite, tmp_path: Path, name: str, text: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "page.md").write_text(f"# Page\n\n{text}\n")
    version = build([Source(folder)], tmp_path / f"{name}.anvilidx").version
    with BlobClient.from_connection_string(azurite.connection_string(), "indexes", "logged.anvilidx") as blob:
        blob.upload_blob((tmp_path / f"{name}.anvilidx").read_bytes(), overwrite=True)
    return version


@pytest.mark.parametrize("level", ["info", "debug"])
def test_a_replica_looking_for_new_versions_logs_no_storage_request(
    azurite: Azurite, tmp_path: Path, level: str
) -> None:
    uploaded(azurite, tmp_path, "v1", "The tide turns twice a day.")
    env = {
        "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string(),
        "ANVIL_INDEX": azurite.url("indexes", "logged.anvilidx"),
        "ANVIL_INDEX_REFRESH_SECONDS": "0.1",
        "ANVIL_LOG_LEVEL": level,
    }
    with run_anvil(tmp_path / "data", env) as server:
        second = uploaded(azurite, tmp_path, "v2", "Monsoon winds turn with the seasons.")
        deadline = time.monotonic() + 30
        # Polled: by the time the new version is served, the replica has looked (one request) a
        # dozen times or more and downloaded the index.
        while httpx.get(f"{server.url}/readyz", timeout=10).json()["index"]["version"] != second:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
    log = server.log()
    assert f"index: now serving version {second}" in log
    assert storage_secrets(log) == []
    loggers = {json.loads(line)["logger"] for line in log.splitlines() if line.startswith("{")}
    if level == "info":
        assert not [name for name in loggers if name.startswith("azure")], loggers
