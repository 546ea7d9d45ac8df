"""With `ANVIL_MAX_CONVERSATIONS_PER_USER=3`, 30 asks with new ids at once created 30
conversations (and 30 starts at once, 4): the quota was counted, then created past. Fixed in
0.4.2. The services first, then two `anvil serve` processes sharing one store (one SQLite
file, or one Cosmos DB container), as two replicas would."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from support.cosmos import CosmosServer
from support.gated import ALICE, Services
from support.history_cluster import Cluster

from app.domain.ask_types import AskRequest, AskResult
from app.errors import QuotaExceeded

pytestmark = pytest.mark.anyio


async def test_asks_creating_conversations_at_once_never_pass_the_quota() -> None:
    services = Services(max_conversations=3)
    services.engine.gate.set()
    outcomes: list[object] = []

    async def ask(n: int) -> None:
        try:
            outcomes.append(await services.asks.ask(ALICE, AskRequest("Q", f"c-{n}")))
        except QuotaExceeded as refused:
            outcomes.append(refused)

    async with anyio.create_task_group() as group:
        for n in range(30):
            group.start_soon(ask, n)
    assert sum(isinstance(o, AskResult) for o in outcomes) == 3
    assert await services.store.count("alice", "tenant-1") == 3
    refusal = next(o for o in outcomes if isinstance(o, QuotaExceeded))
    assert "delete some" in str(refusal)


async def test_starts_at_once_never_pass_the_quota() -> None:
    services = Services(max_conversations=3)
    outcomes: list[object] = []

    async def start() -> None:
        try:
            outcomes.append(await services.conversations.start(ALICE))
        except QuotaExceeded as refused:
            outcomes.append(refused)

    async with anyio.create_task_group() as group:
        for _ in range(30):
            group.start_soon(start)
    assert sum(not isinstance(o, QuotaExceeded) for o in outcomes) == 3
    assert await services.store.count("alice", "tenant-1") == 3


@pytest.fixture(scope="module", params=["sqlite", "cosmos"])
def anvil_pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two processes sharing one store and one signing key, as two replicas would (on Cosmos DB,
    a container of their own on the package's server)."""
    shared: Path = tmp_path_factory.mktemp(f"quota-{request.param}")
    env = {"ANVIL_ANSWER_ENGINE": "echo", "ANVIL_MAX_CONVERSATIONS_PER_USER": "3"}
    if request.param == "cosmos":
        cosmos: CosmosServer = request.getfixturevalue("cosmos")
        env = cosmos.env(**env, ANVIL_COSMOS_CONTAINER=f"served-{uuid.uuid4().hex[:12]}")
    with Cluster(request.param, 2, shared, env) as pair:
        yield pair


def url(pair: Cluster, index: int) -> str:
    found = pair.url(index % 2)
    assert found is not None
    return found


@pytest.mark.anyio
@pytest.mark.parametrize("route", ["ask", "start"])
async def test_thirty_parallel_creations_over_two_servers_keep_three_conversations(
    anvil_pair: Cluster, route: str
) -> None:
    user = f"quota-{route}"
    headers = {"Authorization": f"Bearer {anvil_pair.token(user)}"}
    results: dict[int, httpx.Response] = {}
    limits = httpx.Limits(max_connections=60, max_keepalive_connections=60)

    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers) as http:

        async def create(n: int) -> None:
            base = url(anvil_pair, n)
            if route == "ask":
                body = {"question": f"question {n}", "conversationId": f"new-{n}"}
                results[n] = await http.post(f"{base}/api/ask", json=body)
            else:
                results[n] = await http.post(f"{base}/api/conversations", json={"title": f"start {n}"})

        async with anyio.create_task_group() as group:
            for n in range(30):
                group.start_soon(create, n)

        created = [n for n, r in results.items() if r.status_code in (200, 201)]
        refused = [n for n, r in results.items() if r.status_code == 409]
        assert len(created) == 3, {n: (r.status_code, r.text[:200]) for n, r in results.items()}
        assert len(refused) == 27
        assert all("the most one user may keep (3)" in results[n].text for n in refused)
        listing = await http.get(f"{url(anvil_pair, 1)}/api/conversations")
        kept = [c["conversationId"] for c in listing.json()["conversations"]]
        assert len(kept) == 3

        # One delete gives exactly one slot back, to the first of ten new asks to take it.
        deleted = await http.delete(f"{url(anvil_pair, 0)}/api/conversations/{kept[0]}")
        assert deleted.json() == {"deleted": True}

        async def ask_again(n: int) -> None:
            body = {"question": "again", "conversationId": f"again-{n}"}
            results[100 + n] = await http.post(f"{url(anvil_pair, n)}/api/ask", json=body)

        async with anyio.create_task_group() as group:
            for n in range(10):
                group.start_soon(ask_again, n)
        statuses = Counter(results[100 + n].status_code for n in range(10))
        assert statuses == {200: 1, 409: 9}
        listing = await http.get(f"{url(anvil_pair, 0)}/api/conversations")
        assert len(listing.json()["conversations"]) == 3
