"""A local Entra issuer and a real `anvil serve` signing in against it, shared by the suite."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.entra_issuer import EntraIssuer, running_issuer
from support.entra_keys import signing_key

from .calls import CLIENT_ID, entra_env


@pytest.fixture(scope="session")
def issuer() -> Iterator[EntraIssuer]:
    """Publishes two keys, as Entra does; tokens are signed with the first."""
    with running_issuer(CLIENT_ID, keys=[signing_key("entra-key-1"), signing_key("entra-key-2")]) as running:
        yield running


@pytest.fixture(scope="session")
def server(issuer: EntraIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    """Single-tenant Entra sign-in, SQLite store, echo engine, no app role."""
    with run_anvil(tmp_path_factory.mktemp("entra"), entra_env(issuer)) as running:
        yield running


@pytest.fixture(scope="session", autouse=True)
def no_issuer_outlives_the_suite() -> Iterator[None]:
    """Every local issuer started by the suite has been stopped and its thread joined."""
    yield
    alive = [thread.name for thread in threading.enumerate() if thread.name.startswith("entra-issuer-")]
    assert alive == []
