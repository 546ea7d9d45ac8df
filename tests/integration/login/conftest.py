"""The fixtures of the sign-in tests: a home of the test's own, and a fresh TLS Entra stand-in with
MSAL's session trusting it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from security.calls import CLIENT_ID
from support.entra_issuer import EntraIssuer
from support.sign_in import msal_session, stopped_for_good

from app.client import token_cache


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a test does, defaults resolve under its own folder, never the real user's."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("APPDATA", str(tmp_path / "appdata"))
    monkeypatch.delenv(token_cache.TOKEN_CACHE_VARIABLE, raising=False)


@pytest.fixture
def issuer() -> Iterator[EntraIssuer]:
    """A fresh TLS issuer per test, so its counters count that test's requests only."""
    running = EntraIssuer(client_id=CLIENT_ID, tls=True)
    running.start()
    try:
        yield running
    finally:
        stopped_for_good(running)


@pytest.fixture
def http(issuer: EntraIssuer) -> Iterator[requests.Session]:
    with msal_session(issuer) as session:
        yield session


@pytest.fixture
def cache_path(tmp_path: Path) -> Path:
    """A cache file in folders that do not exist yet."""
    return tmp_path / "config" / "anvil" / "token-cache.bin"
