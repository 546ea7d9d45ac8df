"""A frozen Cosmos DB held each ask 88 s before its 503, while `/readyz` said so within 5 s; a
SQLite database locked by another process held each turn for its whole busy timeout. Fixed in
0.6.0: every store call has a deadline (`ANVIL_STORE_TIMEOUT_SECONDS`), past which the ask is
answered 503 with `Retry-After` naming it, and the next ask is answered once the store is back."""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.cosmos import CosmosServer, node_available, run_cosmos_server

DEADLINE = "1"
TOLD = "The conversation store did not answer within 1 s; retry shortly."


def ask(server: AnvilServer, conversation: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/ask",
        json={"question": "Still there?", "conversationId": conversation},
        headers={"Authorization": f"Bearer {server.token('alice')}"},
        timeout=60,
    )


@pytest.fixture
def cosmos() -> Iterator[CosmosServer]:
    if not node_available():
        pytest.skip("the Cosmos DB-compatible test server is not installed (npm ci)")
    with run_cosmos_server() as server:
        yield server


def test_a_frozen_cosmos_db_is_a_503_within_the_deadline(cosmos: CosmosServer, tmp_path: Path) -> None:
    env = cosmos.env(ANVIL_ANSWER_ENGINE="echo", ANVIL_STORE_TIMEOUT_SECONDS=DEADLINE)
    with run_anvil(tmp_path, env) as server:
        assert ask(server, "c-1").status_code == 200
        cosmos.process.send_signal(signal.SIGSTOP)
        try:
            frozen = ask(server, "c-1")
            ready = httpx.get(f"{server.url}/readyz", timeout=60)
        finally:
            cosmos.process.send_signal(signal.SIGCONT)
        assert frozen.status_code == 503 and frozen.json()["detail"] == TOLD
        assert frozen.headers["Retry-After"] == "1"
        assert ready.status_code == 503 and ready.json()["checks"]["store"] == "unavailable: timeout"
        back = ask(server, "c-1")
        assert back.status_code == 200 and back.json()["turn"] == 2
        assert httpx.get(f"{server.url}/readyz").status_code == 200


def test_a_locked_sqlite_database_is_a_503_within_the_deadline(tmp_path: Path) -> None:
    env = {"ANVIL_ANSWER_ENGINE": "echo", "ANVIL_STORE_TIMEOUT_SECONDS": DEADLINE}
    with run_anvil(tmp_path, env) as server:
        assert ask(server, "c-1").status_code == 200
        other = sqlite3.connect(server.data_dir / "conversations.sqlite3", isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            locked = ask(server, "c-1")
            other.execute("ROLLBACK")
        finally:
            other.close()
        # The deadline, not SQLite's 5 s busy timeout, answered it.
        assert locked.status_code == 503 and locked.json()["detail"] == TOLD
        assert ask(server, "c-1").status_code == 200
