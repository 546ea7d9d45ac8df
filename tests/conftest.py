"""Shared test configuration, and the real `anvil serve` processes several test folders share."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from support.anvil_server import TEST_DEFAULTS, AnvilServer, run_anvil

# In-process apps read their settings from the environment too: the same defaults as the servers.
for _name, _value in TEST_DEFAULTS.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture
def anyio_backend() -> str:
    """Run `@pytest.mark.anyio` tests on asyncio only."""
    return "asyncio"


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    """Dev sign-in, SQLite store, echo engine (answers show the previous question)."""
    with run_anvil(tmp_path_factory.mktemp("dev"), {"ANVIL_ANSWER_ENGINE": "echo"}) as server:
        yield server


@pytest.fixture(scope="session")
def anon_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    """Sign-in off: every caller is anonymous."""
    env = {"ANVIL_ANSWER_ENGINE": "echo", "ANVIL_AUTH_MODE": "none", "ANVIL_STORE": "memory"}
    with run_anvil(tmp_path_factory.mktemp("anon"), env) as server:
        yield server


@pytest.fixture(scope="session")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    """Embedded defaults: SQLite store, retrieval over the project's docs, dev sign-in."""
    with run_anvil(tmp_path_factory.mktemp("docs")) as server:
        yield server
