"""Run a command that file modes bind, even when the tests run as root (as they do in CI)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

#: The capabilities that let root read, write and search whatever a mode says.
_OVERRIDES = "-dac_override,-dac_read_search"


def bound_by_file_modes() -> list[str]:
    """The prefix of a command line under which the command obeys file modes.

    Nothing for a user other than root. For root, `setpriv` (util-linux) dropping the two
    capabilities that override modes, so that a folder of mode 0500 refuses a new file to root as
    it would to anyone. Skips the test when root cannot be bound so here.
    """
    if os.name != "posix" or os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root ignores file modes, and setpriv (util-linux), which can stop that, is missing")
    prefix = [setpriv, f"--inh-caps={_OVERRIDES}", f"--bounding-set={_OVERRIDES}", "--"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        pytest.skip(f"root ignores file modes, and setpriv cannot stop that here: {probe.stderr.strip()}")
    return prefix
