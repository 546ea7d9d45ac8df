"""Run a command with a small (or read-only) disk of its own mounted on a folder: a file system
that fills up, or refuses writes, as a real one would."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def on_a_disk(folder: Path, options: str) -> list[str]:
    """The prefix of a command line that runs it with a fresh tmpfs mounted with `options`
    (`size=64k`, `ro`) on `folder`, in mount and user namespaces of its own, so the mount is
    the command's alone and goes with it. Skips the test where namespaces cannot be made."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare (util-linux), which mounts a disk for one command, is missing")
    prefix = [
        unshare,
        "--map-root-user",
        "--mount",
        "sh",
        "-c",
        f'mount -t tmpfs -o {options} anvil "$0" && exec "$@"',
    ]
    probe = subprocess.run(
        [*prefix, str(folder), "true"], capture_output=True, text=True, timeout=30, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"a disk cannot be mounted for one command here: {probe.stderr.strip()}")
    return [*prefix, str(folder)]
