"""Deletes racing the other operations on one conversation, over real `anvil serve` processes
(one, or two sharing one store): the two reproductions of issue 23.

1. A conversation deleted while asks on it are being answered: no deleted turn comes back, and
   every turn acknowledged after the delete is kept, once, numbered from 1.
2. Reads, an ask and a delete of one conversation at once, round after round: never a 5xx.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import anyio
import httpx
import pytest
from support.cosmos import CosmosServer, run_cosmos_server
from support.history_model import Arrivals, Cluster, StoreName, model_env, model_server, write_corpus
from support.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.anyio

#: Asks in flight when the conversation is deleted, and the turns it held before.
IN_FLIGHT = 7
OLD_TURNS = 3
#: Rounds of {10 get, 1 delete (and 1 ask), 10 get}.
ROUNDS = 25
READS = 10


@dataclass(frozen=True)
class Setup:
    store: StoreName
    processes: int

    @property
    def name(self) -> str:
        return f"{self.store}-{self.processes}p"


SETUPS = [Setup("memory", 1), Setup("sqlite", 1), Setup("sqlite", 2), Setup("cosmos", 1), Setup("cosmos", 2)]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with model_server(0.0) as server:
        yield server


@pytest.fixture(scope="module")
def cosmos() -> Iterator[CosmosServer]:
    with run_cosmos_server() as server:
        yield server


@pytest.fixture(scope="module", params=SETUPS, ids=lambda s: s.name)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI
) -> Iterator[Cluster]:
    setup: Setup = request.param
    folder = tmp_path_factory.mktemp(f"races-{setup.name}")
    env = model_env(fake, write_corpus(folder / "corpus"))
    if setup.store == "cosmos":
        env.update(request.getfixturevalue("cosmos").env())
    with Cluster(setup.store, setup.processes, folder / "data", env) as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=100, keepalive_expiry=2.0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        yield client


class Caller:
    """One signed-in user's requests, spread over the cluster's processes by `via`."""

    def __init__(self, cluster: Cluster, http: httpx.AsyncClient) -> None:
        self.cluster = cluster
        self.http = http
        self.headers = {"Authorization": f"Bearer {cluster.token(f'racer-{uuid.uuid4().hex[:8]}')}"}

    def _url(self, via: int) -> str:
        url = self.cluster.url(via % self.cluster.size)
        assert url is not None
        return url

    async def ask(self, conversation: str, question: str, via: int = 0) -> httpx.Response:
        return await self.http.post(
            f"{self._url(via)}/api/ask",
            json={"question": question, "conversationId": conversation},
            headers=self.headers,
        )

    async def get(self, conversation: str, via: int = 0) -> httpx.Response:
        return await self.http.get(f"{self._url(via)}/api/conversations/{conversation}", headers=self.headers)

    async def delete(self, conversation: str, via: int = 0) -> httpx.Response:
        return await self.http.delete(
            f"{self._url(via)}/api/conversations/{conversation}", headers=self.headers
        )


def questions_of(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    turns = response.json()["turns"]
    assert [t["turn"] for t in turns] == list(range(1, len(turns) + 1)), turns
    return [t["question"] for t in turns]


async def test_a_delete_while_asks_are_answered_keeps_the_later_turns_and_brings_back_none(
    cluster: Cluster, http: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    caller = Caller(cluster, http)
    conversation = f"race-{uuid.uuid4().hex[:8]}"
    old = [f"OLD-{n} of {conversation}?" for n in range(1, OLD_TURNS + 1)]
    new = [f"NEW-{n} of {conversation}?" for n in range(1, IN_FLIGHT + 1)]
    for number, question in enumerate(old, start=1):
        response = await caller.ask(conversation, question, via=number)
        assert response.status_code == 200, response.text
        assert response.json()["turn"] == number
    # The model holds every answer until the delete is through: each ask has read the three old
    # turns and will write only after the conversation is gone (a slow model, made exact).
    release = threading.Event()
    fake.script(*[Reply("what the conversation asks", release=release) for _ in new])
    arrivals = Arrivals(fake)
    answers: dict[str, httpx.Response] = {}
    try:
        async with anyio.create_task_group() as group:

            async def ask(n: int, question: str) -> None:
                answers[question] = await caller.ask(conversation, question, via=n)

            for n, question in enumerate(new):
                group.start_soon(ask, n, question)
            assert await arrivals.wait_for(new), "the asks did not all reach the model"
            deleted = await caller.delete(conversation, via=1)
            assert deleted.status_code == 200, deleted.text
            assert deleted.json() == {"deleted": True}
            gone = await caller.get(conversation)
            assert gone.status_code == 404, gone.text
            release.set()
    finally:
        release.set()

    failed = {q: r.text for q, r in answers.items() if r.status_code != 200}
    assert failed == {}
    results = {q: r.json() for q, r in answers.items()}
    turns = {q: r["turn"] for q, r in results.items()}
    for via in range(cluster.size):
        kept = questions_of(await caller.get(conversation, via=via))
        assert not set(kept) & set(old), f"deleted turns came back: {kept}; the asks were answered {turns}"
        assert kept == sorted(turns, key=turns.__getitem__), (
            f"acknowledged turns lost or out of place: kept {kept}, the asks were answered {turns}"
        )
    # The first turn written after the delete started the conversation again, and says so.
    assert sorted(turns.values()) == list(range(1, IN_FLIGHT + 1)), results
    created = [q for q, r in results.items() if r["created"]]
    assert len(created) == 1, results
    assert turns[created[0]] == 1
    assert "deleted" in (results[created[0]]["note"] or ""), results[created[0]]


async def test_reads_asks_and_deletes_at_once_never_fail(
    cluster: Cluster, http: httpx.AsyncClient, fake: FakeOpenAI
) -> None:
    caller = Caller(cluster, http)
    conversation = f"churn-{uuid.uuid4().hex[:8]}"
    statuses: list[int] = []
    for round_number in range(ROUNDS):
        errors = await churn(caller, conversation, round_number, statuses)
        assert errors == [], f"{errors}\nall statuses so far: {sorted(statuses)}\n{cluster.logs()}"
    assert all(status in (200, 404) for status in statuses)


async def churn(caller: Caller, conversation: str, round_number: int, statuses: list[int]) -> list[str]:
    """One round: a turn, then 10 reads, a delete (every fourth round an ask too) and 10 more
    reads at once. What went wrong, if anything."""
    first = f"round {round_number} first of {conversation}?"
    during = f"round {round_number} during of {conversation}?"
    response = await caller.ask(conversation, first, via=round_number)
    assert response.status_code == 200, response.text
    assert response.json()["turn"] == 1
    errors: list[str] = []
    outcome: dict[str, httpx.Response] = {}

    async def read(via: int) -> None:
        response = await caller.get(conversation, via=via)
        statuses.append(response.status_code)
        if response.status_code == 200:
            held = [t["question"] for t in response.json()["turns"]]
            if not set(held) <= {first, during}:
                errors.append(f"round {round_number}: a read returned {held}")
        elif response.status_code != 404:
            errors.append(f"round {round_number}: get answered {response.status_code}: {response.text}")

    async def call(name: str, via: int) -> None:
        if name == "delete":
            outcome[name] = await caller.delete(conversation, via=via)
        else:
            outcome[name] = await caller.ask(conversation, during, via=via)
        statuses.append(outcome[name].status_code)

    async with anyio.create_task_group() as group:
        for n in range(READS):
            group.start_soon(read, n)
        group.start_soon(call, "delete", round_number + 1)
        if round_number % 4 == 0:
            group.start_soon(call, "ask", round_number)
        for n in range(READS):
            group.start_soon(read, n + 1)

    for name, response in outcome.items():
        if response.status_code != 200:
            errors.append(f"round {round_number}: {name} answered {response.status_code}: {response.text}")
    if errors:
        return errors
    if outcome["delete"].json() != {"deleted": True}:
        errors.append(f"round {round_number}: the delete found nothing: {outcome['delete'].text}")
    # An ask that wrote turn 1 came after the delete, so it stays; one that wrote turn 2 came
    # before it, so it went with the conversation.
    stays = "ask" in outcome and outcome["ask"].json()["turn"] == 1
    expected = [during] if stays else []
    final = await caller.get(conversation, via=round_number + 1)
    held = [] if final.status_code == 404 else questions_of(final)
    if held != expected:
        errors.append(f"round {round_number}: the conversation holds {held} after it, not {expected}")
    if held:
        deleted = await caller.delete(conversation)
        assert deleted.status_code == 200, deleted.text
    return errors
