"""A FIFO at `ANVIL_INDEX` hung Anvil for ever: at start-up it sat at "Waiting for application
startup" (9 minutes and more), and put there later the refresh thread blocked in `open()`, so no
later version was ever served, nothing was logged and `/readyz` stayed 200; SIGTERM then left the
process stuck in its shutdown, and only SIGKILL stopped it. Found by a hostile run on 0.5.0;
fixed in 0.6.0: a FIFO (or socket, or device) is refused at once, naming it, without being
opened; every look and opening in the refresh has a deadline; and a stop signal ends the process
within `ANVIL_DRAIN_SECONDS` plus a few seconds, whatever still waits."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from azure.storage.blob import BlobClient
from support.anvil_server import anvil_command, anvil_run, free_port, run_anvil, stop
from support.azurite import ACCOUNT, Azurite
from support.blob_proxy import HOLD, blob_proxy

from app.knowledge.build import Source, build
from app.serve.server import STOP_GRACE_SECONDS

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs as POSIX has them")

DRAIN = 1
#: What a stop may take at most: the drain, the grace after it, and a margin for a loaded machine.
STOP_BOUND = DRAIN + STOP_GRACE_SECONDS + 4


def page(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "page.md").write_text(f"# Page\n\n{text}\n")
    return folder


def test_a_server_started_on_a_fifo_stops_at_once_naming_it(tmp_path: Path) -> None:
    fifo = tmp_path / "docs.anvilidx"
    os.mkfifo(fifo)
    ran = anvil_run(
        "serve",
        ANVIL_INDEX=str(fifo),
        ANVIL_DATA_DIR=str(tmp_path / "data"),
        ANVIL_PORT=str(free_port()),
        timeout=60,
    )
    said = ran.stdout + ran.stderr
    assert ran.returncode == 3 and "Traceback" not in said
    assert f"Anvil cannot start: ANVIL_INDEX: {fifo} is a FIFO (named pipe), not a file" in said


def test_a_corpus_folder_that_is_a_fifo_stops_start_up_naming_it(tmp_path: Path) -> None:
    fifo = tmp_path / "docs"
    os.mkfifo(fifo)
    ran = anvil_run(
        "serve",
        ANVIL_CORPUS_DIR=str(fifo),
        ANVIL_DATA_DIR=str(tmp_path / "data"),
        ANVIL_PORT=str(free_port()),
    )
    assert ran.returncode == 3
    assert (
        f"Anvil cannot start: ANVIL_CORPUS_DIR: {fifo} is a FIFO (named pipe), not a folder of documents"
        in ran.stdout + ran.stderr
    )


def test_a_fifo_put_where_the_index_is_is_refused_and_the_next_version_served(tmp_path: Path) -> None:
    path = tmp_path / "docs.anvilidx"
    first = build([Source(page(tmp_path, "v1", "The tide turns twice a day."))], path).version
    env = {"ANVIL_INDEX": str(path), "ANVIL_INDEX_REFRESH_SECONDS": "0.1"}
    with run_anvil(tmp_path / "data", env) as server:
        path.unlink()
        os.mkfifo(path)
        deadline = time.monotonic() + 30
        while f"{path} is a FIFO (named pipe), not a file" not in server.log():  # looked at every 0.1 s
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        assert httpx.get(f"{server.url}/readyz", timeout=10).json()["index"]["version"] == first
        scratch = tmp_path / "next.anvilidx"
        second = build(
            [Source(page(tmp_path, "v2", "Monsoon winds turn with the seasons."))], scratch
        ).version
        scratch.replace(path)
        while httpx.get(f"{server.url}/readyz", timeout=10).json()["index"]["version"] != second:
            assert time.monotonic() < deadline + 30, server.log()
            time.sleep(0.05)
    assert server.log().count("is a FIFO (named pipe)") == 1


def stopped_within(process: subprocess.Popen[bytes], log: Path) -> float:
    """SIGTERM `process` and how long it took to exit (failing past `STOP_BOUND`)."""
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_BOUND)
    except subprocess.TimeoutExpired:
        pytest.fail(f"anvil serve was still running {STOP_BOUND} s after SIGTERM:\n{log.read_text()}")
    return time.monotonic() - began


def test_sigterm_ends_a_start_up_that_waits_on_storage_that_never_answers(
    tmp_path: Path, azurite: Azurite
) -> None:
    with blob_proxy(azurite.port) as proxy:
        proxy.set("HEAD", HOLD)
        log = tmp_path / "server.log"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")},
            "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string(),
            "ANVIL_INDEX": proxy.url(ACCOUNT, "indexes", "docs.anvilidx"),
            "ANVIL_DATA_DIR": str(tmp_path / "data"),
            "ANVIL_PORT": str(free_port()),
            "ANVIL_DRAIN_SECONDS": str(DRAIN),
            "ANVIL_EMBEDDINGS": "none",
        }
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*anvil_command(), "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            proxy.wait_for("HEAD", HOLD)  # start-up is now waiting for an answer that never comes
            assert stopped_within(process, log) <= STOP_BOUND
        finally:
            stop(process)
    assert "did not stop within 6 s of the stop signal" in log.read_text()


def test_sigterm_ends_a_server_whose_refresh_waits_on_storage_that_never_answers(
    tmp_path: Path, azurite: Azurite
) -> None:
    with BlobClient.from_connection_string(azurite.connection_string(), "indexes", "held.anvilidx") as blob:
        built = tmp_path / "v1.anvilidx"
        build([Source(page(tmp_path, "v1", "The tide turns twice a day."))], built)
        blob.upload_blob(built.read_bytes(), overwrite=True)
    with blob_proxy(azurite.port) as proxy:
        env = {
            "AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string(),
            "ANVIL_INDEX": proxy.url(ACCOUNT, "indexes", "held.anvilidx"),
            "ANVIL_INDEX_REFRESH_SECONDS": "0.1",
            "ANVIL_DRAIN_SECONDS": str(DRAIN),
        }
        with run_anvil(tmp_path / "data", env, fresh=True) as server:
            proxy.set("HEAD", HOLD)
            proxy.wait_for("HEAD", HOLD)  # the refresh now waits for an answer that never comes
            assert stopped_within(server.process, server.log_path) <= STOP_BOUND
            assert server.process.returncode == 0
