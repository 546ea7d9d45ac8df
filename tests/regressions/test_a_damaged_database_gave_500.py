"""A SQLite file damaged under a running server made every request that touched it a 500 with a
traceback, and readiness stayed up. Fixed in 0.3.0: 503 with `Retry-After`, `/readyz` down until
its pages check out."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import httpx
from support.anvil_server import AnvilServer, run_anvil


def bearer(server: AnvilServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token('mallory')}"}


def test_a_damaged_database_under_a_running_server_is_503_never_500(tmp_path: Path) -> None:
    with run_anvil(tmp_path / "damaged", {"ANVIL_ANSWER_ENGINE": "echo"}) as server:
        auth = bearer(server)
        with httpx.Client(base_url=server.url, headers=auth) as http:
            for n in range(40):
                question = f"question {n} " + "x" * 3000
                created = http.post("/api/ask", json={"question": question, "conversationId": f"d-{n}"})
                assert created.status_code == 200
        database = server.data_dir / "conversations.sqlite3"
        with closing(sqlite3.connect(database)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
        with database.open("r+b") as file:
            size = file.seek(0, 2)
            file.seek(page_size)
            file.write(b"\xa5" * (size - page_size))  # every page but the schema, as a failing disk might
        with closing(sqlite3.connect(database)) as db:
            db.execute("CREATE TABLE touched (x)")  # another writer: the server's cached pages go stale

        listed = httpx.get(f"{server.url}/api/conversations", headers=auth)
        assert listed.status_code == 503, listed.text
        assert listed.headers["content-type"] == "application/problem+json"
        assert listed.headers["retry-after"] == "30"
        asked = httpx.post(
            f"{server.url}/api/ask", json={"question": "q", "conversationId": "d-7"}, headers=auth
        )
        assert asked.status_code == 503
        ready = httpx.get(f"{server.url}/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["store"].startswith("unavailable")
        assert "Traceback" not in server.log()
