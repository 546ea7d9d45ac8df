"""`anvil serve` on the Cosmos DB store, against the Cosmos DB-compatible test server.

Request counts come from the test server's own counters: they are what a real account would
bill (one point read and one write per turn).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.cosmos import CosmosServer, run_cosmos_server

ZERO = {"read": 0, "query": 0, "create": 0, "replace": 0, "upsert": 0, "patch": 0, "delete": 0}


@pytest.fixture(scope="module")
def cosmos() -> Iterator[CosmosServer]:
    with run_cosmos_server() as server:
        yield server


@pytest.fixture(scope="module")
def anvil_pair(
    cosmos: CosmosServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[AnvilServer, AnvilServer]]:
    """Two `anvil serve` processes sharing one Cosmos DB container, as two replicas would."""
    env = cosmos.env(ANVIL_ANSWER_ENGINE="echo")
    with (
        run_anvil(tmp_path_factory.mktemp("cosmos-a"), env) as first,
        run_anvil(tmp_path_factory.mktemp("cosmos-b"), env) as second,
    ):
        yield first, second


def ask(server: AnvilServer, question: str, user: str = "alice", **fields: Any) -> httpx.Response:
    return httpx.post(
        f"{server.url}/api/ask",
        json={"question": question, **fields},
        headers={"Authorization": f"Bearer {server.token(user)}"},
        timeout=30.0,
    )


def item_requests(cosmos: CosmosServer) -> dict[str, int]:
    counts = cosmos.counts()
    return {op: counts[op] for op in ZERO}


def test_a_continued_turn_costs_one_point_read_and_one_write(
    cosmos: CosmosServer, anvil_pair: tuple[AnvilServer, AnvilServer]
) -> None:
    server, _ = anvil_pair
    conversation = f"count-{uuid.uuid4().hex[:8]}"
    user = f"counted-{uuid.uuid4().hex[:8]}"  # a user's first conversation costs the same every run
    ask(server, "earlier", user=user, conversationId=f"{conversation}-earlier")
    cosmos.reset()
    first = ask(server, "first", user=user, conversationId=conversation)
    assert first.status_code == 200, first.text
    assert first.json()["created"] is True
    # The read that finds nothing and the quota's early count (one query in the user's
    # partition), then the store's exact quota: a read of the user's quota item, the
    # placeholder, the admission, and the conversation itself (docs/storage.md).
    assert item_requests(cosmos) == {**ZERO, "read": 2, "query": 1, "create": 1, "replace": 2}

    cosmos.reset()
    second = ask(server, "second", user=user, conversationId=conversation)
    assert second.status_code == 200, second.text
    assert second.json()["turn"] == 2
    assert item_requests(cosmos) == {**ZERO, "read": 1, "replace": 1}
    assert cosmos.counts()["other"] == 0


def test_a_one_shot_ask_touches_no_storage(
    cosmos: CosmosServer, anvil_pair: tuple[AnvilServer, AnvilServer]
) -> None:
    server, _ = anvil_pair
    cosmos.reset()
    response = ask(server, "no conversation id")
    assert response.status_code == 200, response.text
    assert response.json()["conversationId"] is None
    assert {op: n for op, n in cosmos.counts().items() if n} == {}


def test_start_read_list_and_delete_each_cost_one_request_or_two(
    cosmos: CosmosServer, anvil_pair: tuple[AnvilServer, AnvilServer]
) -> None:
    server, _ = anvil_pair
    api = f"{server.url}/api/conversations"
    headers = {"Authorization": f"Bearer {server.token(f'carol-{uuid.uuid4().hex[:8]}')}"}

    cosmos.reset()
    started = httpx.post(api, json={"title": "Counted"}, headers=headers)
    assert started.status_code == 201, started.text
    # The quota's early count, then the user's first creation under the exact quota: the read of
    # a quota item not there yet, one query taking in what is there, the placeholder, the quota
    # item, the conversation.
    assert item_requests(cosmos) == {**ZERO, "read": 1, "query": 2, "create": 2, "replace": 1}
    conversation = started.json()["conversationId"]

    cosmos.reset()
    assert httpx.get(f"{api}/{conversation}", headers=headers).status_code == 200
    assert item_requests(cosmos) == {**ZERO, "read": 1}

    cosmos.reset()
    listed = httpx.get(api, headers=headers)
    assert [c["conversationId"] for c in listed.json()["conversations"]] == [conversation]
    assert item_requests(cosmos) == {**ZERO, "query": 1}

    cosmos.reset()
    assert httpx.delete(f"{api}/{conversation}", headers=headers).json() == {"deleted": True}
    assert item_requests(cosmos) == {**ZERO, "read": 1, "delete": 1}


def test_one_conversation_alternating_between_two_servers_keeps_every_turn_in_order(
    anvil_pair: tuple[AnvilServer, AnvilServer],
) -> None:
    conversation = f"alternate-{uuid.uuid4().hex[:8]}"
    for n in range(1, 11):
        server = anvil_pair[n % 2]
        response = ask(server, f"question {n}", conversationId=conversation)
        assert response.status_code == 200, response.text
        assert response.json()["turn"] == n

    server = anvil_pair[0]
    stored = httpx.get(
        f"{server.url}/api/conversations/{conversation}",
        headers={"Authorization": f"Bearer {server.token('alice')}"},
    )
    assert stored.status_code == 200, stored.text
    turns = stored.json()["turns"]
    assert [t["turn"] for t in turns] == list(range(1, 11))
    assert [t["question"] for t in turns] == [f"question {n}" for n in range(1, 11)]


def test_throttling_beyond_the_retry_budget_is_a_retryable_error(
    cosmos: CosmosServer, anvil_pair: tuple[AnvilServer, AnvilServer]
) -> None:
    server, _ = anvil_pair
    conversation = f"throttled-{uuid.uuid4().hex[:8]}"
    assert ask(server, "first", conversationId=conversation).status_code == 200
    cosmos.reset()
    # The default budget retries nine times; the tenth refusal reaches Anvil.
    cosmos.inject("read", 429, count=9, retry_after_ms=1)
    cosmos.inject("read", 429, count=1, retry_after_ms=2000)
    response = ask(server, "second", conversationId=conversation)
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "2"
    assert "retry in 2 s" in response.json()["detail"]
    assert cosmos.counts()["write"] == 0
    assert ask(server, "second", conversationId=conversation).json()["turn"] == 2


def test_readyz_follows_the_cosmos_server(tmp_path_factory: pytest.TempPathFactory) -> None:
    with run_cosmos_server() as cosmos:
        env = cosmos.env(ANVIL_ANSWER_ENGINE="echo")
        with run_anvil(tmp_path_factory.mktemp("cosmos-ready"), env) as server:
            ready = httpx.get(f"{server.url}/readyz")
            assert ready.status_code == 200, ready.text
            assert ready.json()["checks"]["store"] == "ok"

            cosmos.stop()
            down = httpx.get(f"{server.url}/readyz")
            assert down.status_code == 503, down.text
            assert down.json()["checks"]["store"] == "unavailable: unreachable"
