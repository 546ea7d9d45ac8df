"""A misconfigured Entra sign-in stops `anvil serve` at once: exit code 2 and one line on stderr."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.anvil_server import anvil_command, free_port

from .calls import CLIENT_ID, TENANT

GOOD = {
    "ANVIL_AUTH_MODE": "entra",
    "ANVIL_ENTRA_TENANT_ID": TENANT,
    "ANVIL_ENTRA_CLIENT_ID": CLIENT_ID,
}

CASES = {
    "no-tenant": ({"ANVIL_ENTRA_TENANT_ID": None}, "ANVIL_ENTRA_TENANT_ID"),
    "non-guid-tenant": ({"ANVIL_ENTRA_TENANT_ID": "contoso.onmicrosoft.com"}, "ANVIL_ENTRA_TENANT_ID"),
    "no-client-id": ({"ANVIL_ENTRA_CLIENT_ID": None}, "ANVIL_ENTRA_CLIENT_ID"),
    "non-guid-client-id": ({"ANVIL_ENTRA_CLIENT_ID": "api://anvil"}, "ANVIL_ENTRA_CLIENT_ID"),
    "multi-tenant-without-allow-list": (
        {"ANVIL_ENTRA_TENANT_ID": "organizations"},
        "ANVIL_ENTRA_ALLOWED_TENANTS",
    ),
    "http-authority-off-loopback": (
        {"ANVIL_ENTRA_AUTHORITY": "http://login.microsoftonline.com"},
        "ANVIL_ENTRA_AUTHORITY",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_misconfiguration_stops_serve_with_exit_2_and_one_line(case: str, tmp_path: Path) -> None:
    changes, named = CASES[case]
    settings = {**GOOD, **changes}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    env.update({k: v for k, v in settings.items() if v is not None})
    env.update({"ANVIL_DATA_DIR": str(tmp_path), "ANVIL_PORT": str(free_port())})

    finished = subprocess.run(
        [*anvil_command(), "serve"], env=env, capture_output=True, timeout=60, check=False
    )

    stderr = finished.stderr.decode()
    assert finished.returncode == 2, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("anvil: invalid configuration:")
    assert named in stderr
    assert finished.stdout == b""
