"""The model-based test of conversation history (see `support/history_model.py`): a seeded random
schedule of asks (with and without `clientRequestId`), retries, reads, listings, deletes and
delete-alls, with SIGKILL and a restart of a process on the way, against one and two real
`anvil serve` processes on each store; every answer is checked against the model.

Each run draws a new seed; a failure prints it, and `ANVIL_MODEL_SEED=<seed>` replays that
schedule. `bench/history_soak.py` runs the same rounds for minutes. The checker itself is tested
first, on histories written out by hand: it must refuse what breaks the model and accept every
outcome that overlapping operations allow.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.cosmos import CosmosServer, run_cosmos_server
from support.history_cluster import Cluster, StoreName, model_env, model_server, write_corpus
from support.history_model import check, fresh_namespace, new_seed, report, run_round
from support.history_runner import History, Kind
from support.history_schedule import make_plan
from support.openai_server import FakeOpenAI


@dataclass(frozen=True)
class Setup:
    store: StoreName
    processes: int
    #: SIGKILLs (each followed by a restart) in the round; the memory store would lose everything.
    kills: int

    @property
    def name(self) -> str:
        return f"{self.store}-{self.processes}p"


SETUPS = [
    Setup("memory", 1, kills=0),
    Setup("sqlite", 1, kills=1),
    Setup("sqlite", 2, kills=1),
    Setup("cosmos", 1, kills=1),
    Setup("cosmos", 2, kills=1),
]

#: The size of a round; `bench/history_soak.py --workers 4 --steps 12` runs the same schedules,
#: so a seed either reports replays in the other. 12 steps a worker (20 before): of the 48 steps,
#: about 7 are bursts of 3-7 asks with a delete (or delete-all) sent while they are answered, 8
#: more are deletes, about 20 are asks half of them with a retry key, and half the traffic is on
#: one conversation, so every kind of race still meets on it several times a round; the kill
#: falls between steps 8 and 40, with asks in flight on every side of it. Rounds of this size
#: answered 45-70 asks and 7-10 deletes that found something, on every store.
WORKERS = 4
STEPS = 12
#: Seconds the model takes per request (50-300 ms before). An ask sends it two requests, so it
#: is in flight 40-240 ms plus the store's own work: longer than a delete or a read takes on
#: any store (milliseconds on SQLite, tens on the Cosmos DB test server), so the deletes of a
#: burst and of other workers still land while asks are answered (3 in 4 of the deletes of a
#: round fell inside an ask of their conversation, as with the slower model).
MODEL_DELAY = (0.02, 0.12)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    delays = random.Random(0)
    with model_server(lambda: delays.uniform(*MODEL_DELAY)) as server:
        yield server


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("history-corpus"))


@pytest.fixture(scope="module")
def cosmos() -> Iterator[CosmosServer]:
    with run_cosmos_server() as server:
        yield server


class Clusters:
    """One cluster per store, shared by that store's setups one after the other (the one-process
    round, then a second process started for the two-process round): each round has a namespace
    of its own, and the restart of its kill is its own, so a round never needs a new store; it
    saves starting again what the setup before left running. A round that failed leaves its
    cluster to no other."""

    def __init__(self, folder: Path, stack: ExitStack) -> None:
        self.folder = folder
        self.stack = stack
        self.running: dict[StoreName, Cluster] = {}

    def of(self, setup: Setup, env: dict[str, str]) -> Cluster:
        cluster = self.running.get(setup.store)
        if cluster is None:
            cluster = Cluster(setup.store, setup.processes, self.folder / setup.store, env)
            self.running[setup.store] = self.stack.enter_context(cluster)
        else:
            cluster.resize(setup.processes)
        return cluster

    def drop(self, store: StoreName) -> None:
        cluster = self.running.pop(store, None)
        if cluster is not None:
            cluster.close()


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with ExitStack() as stack:
        yield Clusters(tmp_path_factory.mktemp("history-data"), stack)


def replay_seed() -> int | None:
    value = os.environ.get("ANVIL_MODEL_SEED", "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"ANVIL_MODEL_SEED must be an integer seed, not {value!r}") from None


@pytest.mark.anyio
@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.name)
async def test_every_answer_fits_the_history_model(
    setup: Setup, request: pytest.FixtureRequest, clusters: Clusters, fake: FakeOpenAI, corpus: Path
) -> None:
    seed = replay_seed()
    if seed is None:
        seed = new_seed()
    try:
        await run_setup(setup, seed, request, clusters, fake, corpus)
    except BaseException as error:
        clusters.drop(setup.store)
        # Whatever failed (a check, or a server that would not start), the seed replays it.
        error.add_note(
            f"history model: {setup.name}, seed {seed} (replay with ANVIL_MODEL_SEED={seed}, or "
            f"bench/history_soak.py --minutes 0 --seed {seed} --store {setup.store} --processes "
            f"{setup.processes} --kills {setup.kills} --workers {WORKERS} --steps {STEPS})"
        )
        raise


async def run_setup(
    setup: Setup,
    seed: int,
    request: pytest.FixtureRequest,
    clusters: Clusters,
    fake: FakeOpenAI,
    corpus: Path,
) -> None:
    env = model_env(fake, corpus)
    if setup.store == "cosmos":
        env.update(request.getfixturevalue("cosmos").env())
    plan = make_plan(
        seed,
        namespace=fresh_namespace(),
        processes=setup.processes,
        workers=WORKERS,
        steps=STEPS,
        kills=setup.kills,
    )
    cluster = clusters.of(setup, env)
    kills_before = cluster.kills
    history = await run_round(cluster, fake, plan)
    if history.violations:
        pytest.fail(f"{report(history, plan, setup.name)}\n{cluster.logs()}", pytrace=False)
    assert cluster.kills - kills_before == setup.kills
    asks = [op for op in history.ops if op.kind == "ask"]
    # The round did what it is for: asks answered, and deletes that found something.
    assert sum(op.fresh for op in asks) >= WORKERS * STEPS // 4
    assert any(op.kind == "delete" and op.expected and op.body["deleted"] for op in history.ops)


# -- the checker, on histories written out by hand (times in seconds; one user, one conversation)


class Written:
    """A history built op by op: `ask("a", 0, 1, turn=1)` is an ask of question "a" sent at 0 and
    answered at 1 as turn 1."""

    def __init__(self) -> None:
        self.history = History()

    def _op(self, kind: Kind, start: float, end: float, status: int | None, body: Any, **fields: Any) -> None:
        conversation = None if kind in ("list", "delete_all") else "c"
        self.history.new(
            kind=kind, user="u", conversation=conversation, server=0, epoch=0, start=start, end=end,
            status=status, body=body, **fields,
        )  # fmt: skip

    def ask(
        self,
        question: str,
        start: float,
        end: float,
        *,
        turn: int,
        key: str | None = None,
        replay: bool = False,
    ) -> None:
        note = f"Replayed: clientRequestId {key!r} was already answered as turn {turn}." if replay else None
        body = {"turn": turn, "created": turn == 1, "note": note}
        self._op("ask", start, end, 200, body, question=question, client_request_id=key)

    def cut_off(self, question: str, start: float, key: str | None = None) -> None:
        self._op(
            "ask", start, start + 0.1, None, None, question=question, client_request_id=key, cut_off=True
        )
        self.history.ops[-1].bound = math.inf

    def get(self, start: float, end: float, *questions: str) -> None:
        if not questions:
            self._op("get", start, end, 404, {"detail": "not found"})
            return
        turns = [{"turn": n, "question": q} for n, q in enumerate(questions, start=1)]
        self._op("get", start, end, 200, {"turns": turns})

    def delete(self, start: float, end: float, *, deleted: bool = True) -> None:
        self._op("delete", start, end, 200, {"deleted": deleted})

    def problems(self) -> list[str]:
        return check(self.history)


def test_the_checker_accepts_turns_kept_and_deleted_in_order() -> None:
    h = Written()
    h.ask("a", 0, 1, turn=1)
    h.ask("b", 2, 3, turn=2, key="k")
    h.ask("b", 4, 5, turn=2, key="k", replay=True)
    h.get(6, 7, "a", "b")
    h.delete(8, 9)
    h.get(10, 11)
    h.ask("c", 12, 13, turn=1)
    h.get(14, 15, "c")
    assert h.problems() == []


def test_the_checker_refuses_a_deleted_turn_that_comes_back() -> None:
    h = Written()
    h.ask("a", 0, 1, turn=1)
    h.delete(2, 3)
    h.ask("b", 4, 5, turn=1)
    h.get(6, 7, "a", "b")
    assert any("'a' is back" in p for p in h.problems())


def test_the_checker_refuses_an_acknowledged_turn_that_is_lost() -> None:
    h = Written()
    h.ask("a", 0, 1, turn=1)
    h.ask("b", 0.5, 2, turn=2)
    h.get(3, 4, "a")
    assert any("turn 2 of 'b' is missing" in p for p in h.problems())


def test_the_checker_refuses_a_replay_that_adds_a_turn() -> None:
    h = Written()
    h.ask("a", 0, 1, turn=1, key="k")
    h.ask("a", 0.5, 2, turn=2, key="k")
    assert any("the same clientRequestId added two turns" in p for p in h.problems())


def test_the_checker_refuses_a_question_twice_and_a_gap_in_the_numbers() -> None:
    h = Written()
    h.ask("a", 0, 1, turn=1)
    h.ask("b", 1, 2, turn=2)
    h.get(3, 4, "a", "a")
    h.get(5, 6, "a", "b")
    h.history.ops[-1].body["turns"][1]["turn"] = 3
    problems = h.problems()
    assert any("appears twice" in p for p in problems)
    assert any("must number 1..2 with no gap" in p for p in problems)


def test_the_checker_refuses_a_delete_that_misses_an_acknowledged_turn() -> None:
    h = Written()
    h.ask("a", 0, 1, turn=1)
    h.delete(2, 3, deleted=False)
    assert any("turn 1 of 'a' is missing" in p for p in h.problems())


@pytest.mark.parametrize("kept", [True, False])
def test_an_ask_overlapping_a_delete_may_be_kept_or_gone(kept: bool) -> None:
    h = Written()
    h.ask("old", 0, 1, turn=1)
    # Answered as turn 2 of the old conversation (so written before the delete), or as turn 1 of
    # a new one (written after it, so kept).
    h.ask("new", 2, 10, turn=1 if kept else 2)
    h.delete(3, 4)
    h.get(11, 12, *(["new"] if kept else []))
    assert h.problems() == []


def test_the_order_search_refuses_a_new_conversation_lost_after_the_delete() -> None:
    h = Written()
    h.ask("old", 0, 1, turn=1)
    # Turn 1 while "old" was there until the delete: so written after the delete, and must stay.
    # The rules alone cannot tell (the ask overlaps the delete); the order search can.
    h.ask("new", 2, 10, turn=1)
    h.delete(3, 4)
    h.get(11, 12)
    problems = h.problems()
    assert len(problems) == 1 and "no order of its operations" in problems[0], problems


@pytest.mark.parametrize("seen", [(), ("a",)])
def test_an_ask_cut_off_by_a_kill_may_be_kept_or_not(seen: tuple[str, ...]) -> None:
    h = Written()
    h.cut_off("a", 0, key="k")
    h.get(1, 2, *seen)
    assert h.problems() == []


def test_an_ask_cut_off_and_retried_is_kept_at_most_once() -> None:
    h = Written()
    h.cut_off("a", 0, key="k")
    h.ask("a", 1, 2, turn=1, key="k", replay=True)
    h.get(3, 4, "a")
    assert h.problems() == []
    twice = Written()
    twice.cut_off("a", 0, key="k")
    twice.ask("a", 1, 2, turn=2, key="k")
    twice.get(3, 4, "a", "a")
    assert twice.problems() != []
