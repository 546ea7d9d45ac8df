"""Many turns on one conversation at once, across two `anvil serve` processes sharing one store
(as two replicas would): every turn is kept, once, in one order, and nobody gets an error."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import httpx
import pytest
from support.cosmos import run_cosmos_server
from support.history_cluster import Cluster

pytestmark = pytest.mark.anyio

#: Asks sent at once (200 before): 40 on each process, so each process's writers of the
#: conversation queue up behind one another while the other process's writes keep outdating
#: what they read. Runs of 80 had as many writes refused on a stale version and retried (15-25
#: a run, on either store) as runs of 200 (3-30): a longer queue repeats the same interleavings.
ASKS = 80
#: Room for every turn of the test in one conversation.
ROOMY = {"ANVIL_ANSWER_ENGINE": "echo", "ANVIL_HISTORY_MAX_TURNS": "1000"}


@pytest.fixture(scope="module", params=["sqlite", "cosmos"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two processes on one store: one SQLite file in a shared data folder, or one Cosmos DB container."""
    shared = tmp_path_factory.mktemp(f"pair-{request.param}")
    if request.param == "sqlite":
        with Cluster("sqlite", 2, shared, ROOMY) as running:
            yield running
        return
    with run_cosmos_server() as cosmos, Cluster("cosmos", 2, shared, cosmos.env(**ROOMY)) as running:
        yield running


def url(pair: Cluster, index: int) -> str:
    found = pair.url(index)
    assert found is not None
    return found


async def test_many_parallel_asks_on_one_conversation_keep_every_turn(pair: Cluster) -> None:
    conversation = f"busy-{uuid.uuid4().hex[:8]}"
    token = pair.token("alice")  # both processes share the data folder, so the signing key
    headers = {"Authorization": f"Bearer {token}"}
    results: dict[int, httpx.Response] = {}
    limits = httpx.Limits(max_connections=ASKS, max_keepalive_connections=ASKS)

    async with httpx.AsyncClient(timeout=60, limits=limits) as http:

        async def ask(n: int) -> None:
            results[n] = await http.post(
                f"{url(pair, n % 2)}/api/ask",
                json={"question": f"question {n}", "conversationId": conversation},
                headers=headers,
            )

        async with anyio.create_task_group() as group:
            for n in range(ASKS):
                group.start_soon(ask, n)

        failed = {n: r.text for n, r in results.items() if r.status_code != 200}
        assert failed == {}
        assert sorted(r.json()["turn"] for r in results.values()) == list(range(1, ASKS + 1))
        assert sum(r.json()["created"] for r in results.values()) == 1
        stored = await http.get(f"{url(pair, 0)}/api/conversations/{conversation}", headers=headers)
    turns = stored.json()["turns"]
    assert [t["turn"] for t in turns] == list(range(1, ASKS + 1))
    assert sorted(t["question"] for t in turns) == sorted(f"question {n}" for n in range(ASKS))
    for n, response in results.items():
        assert turns[response.json()["turn"] - 1]["question"] == f"question {n}"
