"""Deleting a conversation while asks on it were being answered brought the deleted turns back
and dropped turns already acknowledged (SQLite, one or two processes; the memory store too), as
a concurrency token read before the delete matched the conversation written after it. Fixed in
0.4.2."""

from __future__ import annotations

import threading
import uuid

import anyio
import httpx
import pytest
from support.gated import ALICE, Services
from support.history_cluster import Arrivals, Cluster
from support.openai_server import FakeOpenAI, Reply
from support.races import Caller, questions_of

from app.domain.ask_types import AskRequest, AskResult

pytestmark = pytest.mark.anyio

#: Asks in flight when the conversation is deleted, and the turns it held before.
IN_FLIGHT = 7
OLD_TURNS = 3


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


# --- the same, in the domain's services ------------------------------------------------------


async def test_an_ask_whose_conversation_was_deleted_meanwhile_starts_it_again_with_only_its_turn() -> None:
    services = Services()
    await services.seed("OLD-1", "OLD-2", "OLD-3")
    results: list[AskResult] = []

    async def ask() -> None:
        results.append(await services.asks.ask(ALICE, AskRequest("NEW-1", "c")))

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        await services.engine.wait_for_calls(1)
        assert await services.conversations.delete(ALICE, "c") is True
        services.engine.gate.set()
    (result,) = results
    assert (result.turn, result.created) == (1, True)
    assert result.note is not None and "was deleted while this answer was written" in result.note
    assert await services.questions() == ["NEW-1"]


async def test_seven_asks_racing_a_delete_keep_all_seven_turns_and_none_of_the_deleted_ones() -> None:
    services = Services()
    await services.seed("OLD-1", "OLD-2", "OLD-3")
    results: list[AskResult] = []

    async def ask(n: int) -> None:
        results.append(await services.asks.ask(ALICE, AskRequest(f"NEW-{n}", "c")))

    async with anyio.create_task_group() as group:
        for n in range(1, 8):
            group.start_soon(ask, n)
        await services.engine.wait_for_calls(7)
        assert await services.conversations.delete(ALICE, "c") is True
        services.engine.gate.set()
    stored = await services.questions()
    assert sorted(stored) == sorted(f"NEW-{n}" for n in range(1, 8))
    assert sorted(r.turn for r in results if r.turn is not None) == list(range(1, 8))
    _, turns = await services.conversations.get(ALICE, "c")
    assert [t.number for t in turns] == list(range(1, 8))
    assert sum(r.created for r in results) == 1


async def test_a_retry_after_a_delete_does_not_replay_the_deleted_turn() -> None:
    services = Services()
    services.engine.gate.set()
    first = await services.asks.ask(ALICE, AskRequest("Q", "c", client_request_id="r1"))
    assert first.turn == 1
    assert await services.conversations.delete(ALICE, "c") is True
    again = await services.asks.ask(ALICE, AskRequest("Q", "c", client_request_id="r1"))
    assert again.note is None or "Replayed" not in again.note
    assert (again.turn, again.created) == (1, True)
    assert await services.questions() == ["Q"]


async def test_a_writer_queued_behind_one_whose_conversation_was_deleted_starts_from_the_store() -> None:
    services = Services()
    await services.seed("OLD-1")
    results: list[AskResult] = []

    async def ask(question: str) -> None:
        results.append(await services.asks.ask(ALICE, AskRequest(question, "c")))

    async with anyio.create_task_group() as group:
        group.start_soon(ask, "NEW-1")
        group.start_soon(ask, "NEW-2")
        await services.engine.wait_for_calls(2)
        services.engine.gate.set()
        # Let the first writer land, then delete before the second one writes.
        while not results:
            await anyio.lowlevel.checkpoint()
        await services.conversations.delete_all(ALICE)
    remaining = await services.conversations.list(ALICE)
    for summary in remaining.items:
        assert "OLD-1" not in await services.questions(summary.conversation_id)
