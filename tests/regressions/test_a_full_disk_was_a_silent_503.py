"""With the data folder's disk full, every ask with a `conversationId` got "store is busy or
unavailable" (100 of 100), nothing at WARNING or above was logged and `/readyz` said "ok". Fixed in
0.6.0: the failure is logged at ERROR once, with what to do, counted, and `/readyz` answers 503
naming it until a write succeeds again, which it tries by itself once space is freed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB file system of its own (tmpfs), where a test can fill the disk."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no room left; the file, to remove to free it."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


def ask(server: AnvilServer, conversation: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/ask",
        json={"question": "q" * 7000, "conversationId": conversation},
        headers={"Authorization": f"Bearer {server.token('alice')}"},
        timeout=30,
    )


def errors(server: AnvilServer) -> list[str]:
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    return [line["message"] for line in lines if line.get("level") in ("ERROR", "error")]


def test_a_full_disk_is_loud_fails_readiness_and_comes_back_once_freed(small_disk: Path) -> None:
    env = {"ANVIL_ANSWER_ENGINE": "echo", "ANVIL_LOG_LEVEL": "info"}
    with run_anvil(small_disk / "data", env) as server:
        assert ask(server, "before").status_code == 200
        filler = fill(small_disk)

        refused = [ask(server, f"full-{n}") for n in range(3)]
        assert [r.status_code for r in refused] == [503, 503, 503]
        assert refused[0].json()["detail"] == "The conversation store cannot write; retry later."
        assert refused[0].headers["Retry-After"] == "30"
        ready = httpx.get(f"{server.url}/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["store"] == "unavailable: disk-full"
        (said,) = errors(server)  # once, however many asks failed
        assert "(disk-full)" in said and "free space on the disk that holds" in said

        filler.unlink()
        assert httpx.get(f"{server.url}/readyz").status_code == 200  # its own write passed
        assert ask(server, "after").status_code == 200
        assert "writes again (it was failing: disk-full)" in server.log()
