"""What a real `anvil serve` refuses, and says why: a data folder it cannot use or a damaged database
at start-up (one line), a new conversation past the quota (409), a caller past the rate limit
(429)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.anvil_server import AnvilServer, anvil_command, free_port, run_anvil
from support.jsonrpc import envelope


def logged_messages(output: str) -> list[str]:
    """The messages of the JSON log lines in `output` (every line of it is one)."""
    lines = [line for line in output.splitlines() if line.strip()]
    return [json.loads(line)["message"] for line in lines]


def bearer(server: AnvilServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token('mallory')}"}


def test_an_unusable_data_folder_stops_start_up_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file, not a folder")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    env |= {"ANVIL_DATA_DIR": str(tmp_path / "data"), "ANVIL_PORT": str(free_port())}
    ran = subprocess.run(
        [*anvil_command(), "serve"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode != 0
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output
    (reason,) = [message for message in logged_messages(output) if "Anvil cannot start" in message]
    assert reason.endswith(
        f"cannot create the data folder {tmp_path / 'data'}: a file is in its place: "
        "set ANVIL_DATA_DIR to a folder Anvil can write to"
    )


#: Requests one caller may make a minute on `limited`: above the dozen or so the quota test
#: makes as its one user, so that only the rate limit's own test meets it.
RATE_LIMIT = 15


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    """A small conversation quota and a rate limit, each met by a caller of its own test."""
    env = {
        "ANVIL_ANSWER_ENGINE": "echo",
        "ANVIL_MAX_CONVERSATIONS_PER_USER": "2",
        "ANVIL_RATE_LIMIT_PER_MINUTE": str(RATE_LIMIT),
    }
    with run_anvil(tmp_path_factory.mktemp("limited"), env) as running:
        yield running


def test_the_conversation_quota_refuses_only_new_conversations(limited: AnvilServer) -> None:
    auth = bearer(limited)
    url = limited.url
    assert httpx.post(
        f"{url}/api/ask", json={"question": "q", "conversationId": "q-1"}, headers=auth
    ).is_success
    assert httpx.post(f"{url}/api/conversations", json={}, headers=auth).status_code == 201
    refused = httpx.post(f"{url}/api/ask", json={"question": "q", "conversationId": "q-3"}, headers=auth)
    assert refused.status_code == 409
    assert refused.json()["type"].endswith("/quota-exceeded")
    assert refused.json()["detail"].startswith("You keep 2 conversations, the most one user may keep (2)")
    started = httpx.post(f"{url}/api/conversations", json={}, headers=auth)
    assert started.status_code == 409 and "delete_conversation" in started.json()["detail"]

    arguments = {"question": "q", "conversationId": "q-4"}
    call = envelope("tools/call", {"name": "ask", "arguments": arguments}, request_id=4)
    result = httpx.post(limited.mcp_url, content=call.content, headers={**call.headers, **auth})
    assert result.json()["result"]["isError"] is True
    assert result.json()["result"]["content"][0]["text"].startswith("You keep 2 conversations")

    continued = httpx.post(
        f"{url}/api/ask", json={"question": "again", "conversationId": "q-1"}, headers=auth
    )
    assert continued.json()["turn"] == 2, "existing conversations keep working"
    assert httpx.delete(f"{url}/api/conversations/q-1", headers=auth).json() == {"deleted": True}
    assert httpx.post(
        f"{url}/api/ask", json={"question": "q", "conversationId": "q-3"}, headers=auth
    ).is_success


def test_the_rate_limit_refuses_a_caller_beyond_it_and_no_one_else(limited: AnvilServer) -> None:
    alice, bob = ({"Authorization": f"Bearer {limited.token(name)}"} for name in ("alice", "bob"))
    # One client: the whole minute's allowance goes out well within the few seconds that refill
    # a single request.
    with httpx.Client(base_url=limited.url) as http:
        statuses = [
            http.post("/api/ask", json={"question": "q"}, headers=alice).status_code
            for _ in range(RATE_LIMIT + 1)
        ]
        assert statuses == [200] * RATE_LIMIT + [429]
        refused = http.post("/api/ask", json={"question": "q"}, headers=alice)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert http.post("/api/ask", json={"question": "q"}, headers=bob).status_code == 200


def test_a_damaged_database_is_refused_at_start_up_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "conversations.sqlite3").write_bytes(b"SQLite format 3\x00" + b"\xa5" * 8192)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    env |= {"ANVIL_DATA_DIR": str(data), "ANVIL_PORT": str(free_port())}
    ran = subprocess.run(
        [*anvil_command(), "serve"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode != 0
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output
    (reason,) = [message for message in logged_messages(output) if "Anvil cannot start" in message]
    assert f"{data / 'conversations.sqlite3'} is not a usable SQLite database (" in reason
    assert reason.endswith("restore it from a backup, or move it away to start with no conversations")
