"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.azurite import Azurite, not_installed, run_azurite


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite, started for the module, with the `indexes` and `docs` containers; `npm ci`
    installs it, and a test that needs it fails (never skips) without it."""
    problem = not_installed()
    if problem is not None:
        pytest.fail(problem)
    with run_azurite(tmp_path_factory.mktemp("azurite")) as server:
        for container in ("indexes", "docs"):
            server.create_container(container)
        yield server
