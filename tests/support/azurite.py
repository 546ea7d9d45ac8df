"""Run Azurite's Blob service (the Azure Storage emulator, from `npm ci`) on a free loopback port."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from azure.storage.blob import BlobServiceClient

from support.anvil_server import free_port, stop

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE = REPO_ROOT / "node_modules" / ".bin" / "node"
AZURITE_BLOB = REPO_ROOT / "node_modules" / ".bin" / "azurite-blob"
START_TIMEOUT = 30.0

#: Azurite's well-known development account and key, which Microsoft publishes for the emulator.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class Azurite:
    """A running Blob service: its endpoint, its connection string, and URLs into it."""

    port: int

    @property
    def account_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    def connection_string(self, key: str = ACCOUNT_KEY) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
            f"BlobEndpoint={self.account_url};"
        )

    def url(self, container: str, name: str = "") -> str:
        """The path-style URL of a blob (or a folder of blobs) in `container`."""
        return f"{self.account_url}/{container}/{name}"

    def create_container(self, name: str) -> None:
        with BlobServiceClient.from_connection_string(self.connection_string()) as service:
            service.create_container(name)


def not_installed() -> str | None:
    """What to do when Node or Azurite is not installed; None when both are."""
    for needed in (NODE, AZURITE_BLOB):
        if not needed.exists():
            return f"{needed.relative_to(REPO_ROOT)} is missing: run `npm ci` at the repository root"
    return None


@contextmanager
def run_azurite(location: Path) -> Iterator[Azurite]:
    """Start Azurite's Blob service keeping its data in `location`; always stop it afterwards.

    Raises `RuntimeError` (saying to run `npm ci`) when it is not installed.
    """
    missing = not_installed()
    if missing is not None:
        raise RuntimeError(missing)
    location.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = location / "azurite.log"
    with open(log_path, "wb") as log:  # a file, not a pipe nobody reads, which could stall it
        process = subprocess.Popen(
            [
                str(NODE),
                str(AZURITE_BLOB),
                *("--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(location / "data")),
                *("--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry"),
            ],
            cwd=location,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            azurite = Azurite(port)
            _wait_until_answering(azurite, process, log_path)
            yield azurite
        finally:
            stop(process)


def _wait_until_answering(azurite: Azurite, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Poll until the service answers any HTTP request; fail with its log if it exits or stays mute."""
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"azurite-blob exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                client.get(f"{azurite.account_url}?comp=list")
                return
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # polling interval of a readiness probe, not synchronisation
    raise RuntimeError(f"azurite-blob did not answer in {START_TIMEOUT}s:\n{log_path.read_text()}")


@pytest.fixture(scope="module", name="azurite")
def azurite_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite, started for the module, with the `indexes` and `docs` containers; `npm ci`
    installs it, and a test that needs it fails (never skips) without it. Imported by the
    conftest of each folder whose tests use it."""
    problem = not_installed()
    if problem is not None:
        pytest.fail(problem)
    with run_azurite(tmp_path_factory.mktemp("azurite")) as server:
        for container in ("indexes", "docs"):
            server.create_container(container)
        yield server


#: What no log line may hold: a request's or answer's headers, a signature, the account key.
_NEVER_LOGGED = (
    "Request URL",
    "Request headers",
    "Response headers",
    "x-ms-",
    "User-Agent",
    "Authorization",
    "SharedKey",
    "sig=",
    "AccountKey",
    ACCOUNT_KEY,
)


def storage_secrets(log: str) -> list[str]:
    """The lines of `log` that hold a Blob Storage request's URL, a header, or a credential."""
    return [line for line in log.splitlines() if any(mark in line for mark in _NEVER_LOGGED)]
