"""A model-based test of conversation history: a seeded random schedule of asks, retries, reads
and deletes run against real `anvil serve` processes (some killed with SIGKILL and restarted on
the way), and a checker that holds every answer against a simple model of what history must be.

Shared by `tests/integration/test_history_model.py` (one short round per store) and
`bench/history_soak.py` (rounds back to back for minutes).

The model is one list of turns per conversation: an ask appends its question (or, when its
`clientRequestId` is already there, replays it and appends nothing), a delete empties the list.
The operations overlap in time, so the checker cannot know the order the service applied them
in; it knows only when each request was sent and when its answer came. Two kinds of check:

- rules with precise messages: turns number 1..N; no question appears twice; a turn whose ask
  was answered before a delete started never comes back once that delete has answered; an
  acknowledged turn is present in every later read unless a delete that may have run after it
  (one that ended after the ask began) removed it; a replayed `clientRequestId` adds no turn;
  no 5xx, no failed request but those cut off by a kill;
- a linearizability check per conversation (Wing and Gong's search): some order of the
  operations, each placed between its request and its answer, gives every answer seen when run
  one at a time on the model. An operation cut off by a kill may be placed anywhere after its
  request, or not at all.

The schedule (which operations, on which conversation, to which process, and when the kills
come) is a pure function of the seed; the interleaving it meets is not, as it depends on timing.
A failing seed fails again with high probability, not certainty.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx

from app.auth.dev import DevIssuer
from support.anvil_server import PASSED_THROUGH, AnvilServer, PortTaken, start_anvil, stop
from support.openai_server import FakeOpenAI, running_openai

StoreName = Literal["memory", "sqlite", "cosmos"]
Kind = Literal["ask", "get", "list", "delete", "delete_all"]

#: History bounds far above what a round writes, so the model never has to drop a turn.
ROOMY = {
    "ANVIL_HISTORY_MAX_TURNS": "1000",
    "ANVIL_HISTORY_MAX_BYTES": "1048576",
    "ANVIL_MAX_CONVERSATIONS_PER_USER": "10000",
}

#: A corpus of one small file: retrieval stays cheap, and every answer still has a passage.
CORPUS = """# Conversations

A conversation keeps its turns in order. Deleting a conversation removes every turn of it, and
a later ask with the same id starts a new conversation.
"""

#: Longest wait for any one request; a request that takes longer is a hang, reported as such.
REQUEST_TIMEOUT = 60.0
#: Longest wait for a killed process to serve again (`anvil_server` gives a start 60 s).
RESTART_TIMEOUT = 90.0
#: Longest wait for the asks of a burst to reach the model before its delete is sent anyway.
ARRIVAL_TIMEOUT = 10.0
#: Search steps the linearizability check may take for one conversation before it gives up.
SEARCH_BUDGET = 200_000


# ---------------------------------------------------------------------------------------------
# The servers


def model_env(fake: FakeOpenAI, corpus: Path) -> dict[str, str]:
    """`ANVIL_*` settings that point `anvil serve` at the local OpenAI-protocol server."""
    return {
        "ANVIL_ANSWER_ENGINE": "openai",
        "ANVIL_OPENAI_BASE_URL": f"{fake.url}/v1",
        "ANVIL_OPENAI_MODEL": "local-model",
        "ANVIL_OPENAI_API_KEY": "sk-local-history-model",
        "ANVIL_CORPUS_DIR": str(corpus),
        "ANVIL_ANSWER_TIMEOUT_SECONDS": "30",
    }


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conversations.md").write_text(CORPUS, encoding="utf-8")
    return folder


class Cluster:
    """`size` `anvil serve` processes on one store (one data folder, so one SQLite file and one
    signing key), any of which can be killed with SIGKILL and started again.

    Use it as a context manager: every process it started is reaped on the way out.
    """

    def __init__(self, store: StoreName, size: int, data_dir: Path, env: Mapping[str, str]) -> None:
        if store == "memory" and size != 1:
            raise ValueError("the memory store lives in one process: run one")
        self.store = store
        self.size = size
        self.data_dir = data_dir
        self.env = {**env, "ANVIL_STORE": store}
        self._servers: list[AnvilServer | None] = [None] * size
        #: How many times each process was killed; an answer lost while it changed is explained.
        self.epochs = [0] * size
        #: When each killed incarnation, by (index, epoch), was reaped: nothing it did lands later.
        self.reaped_at: dict[tuple[int, int], float] = {}
        self.kills = 0
        self._issuer: DevIssuer | None = None

    def __enter__(self) -> Cluster:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            # One after the other: the first creates the signing key the others load.
            for index in range(self.size):
                self._start(index)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for index, server in enumerate(self._servers):
            if server is not None:
                self._servers[index] = None
                stop(server.process)

    def token(self, user: str, ttl: int = 3600) -> str:
        if self._issuer is None:
            self._issuer = DevIssuer.load_or_create(self.data_dir)
        return self._issuer.mint(user, ttl=ttl)

    def url(self, index: int) -> str | None:
        server = self._servers[index]
        return None if server is None else server.url

    def live(self) -> list[int]:
        return [i for i, server in enumerate(self._servers) if server is not None]

    async def wait_live(self) -> None:
        """Until some process is up (polled, with a deadline: a restart takes a second or two)."""
        deadline = time.monotonic() + RESTART_TIMEOUT
        while not self.live():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no process came back within {RESTART_TIMEOUT} s:\n{self.logs()}")
            await anyio.sleep(0.02)

    def logs(self, limit: int = 20) -> str:
        """The last records of every process's log (killed incarnations included), each an
        error's message and the last line of its traceback."""
        parts = []
        for path in sorted(self.data_dir.glob("p*.log")):
            records = [_log_record(line) for line in path.read_text(errors="replace").splitlines()]
            if records:
                parts.append(f"--- {path.name}\n" + "\n".join(records[-limit:]))
        return "\n".join(parts)

    async def kill_and_restart(self, index: int) -> None:
        """SIGKILL process `index`, reap it, and start it again (on another port)."""
        server = self._servers[index]
        if server is None:
            return
        # Marked dead before the signal, so every request cut off by it is known to be.
        self._servers[index] = None
        epoch = self.epochs[index]
        self.epochs[index] = epoch + 1
        server.process.kill()
        server.process.wait()
        self.reaped_at[(index, epoch)] = time.monotonic()
        self.kills += 1
        # Not abandoned on cancellation: `_start` records the process itself, so it is reaped.
        await anyio.to_thread.run_sync(self._start, index)

    def _start(self, index: int) -> None:
        name = f"p{index}-{self.epochs[index]}"
        for attempt in range(3):
            try:
                self._servers[index] = start_anvil(self.data_dir, self._full_env(), name)
                return
            except PortTaken:
                if attempt == 2:
                    raise

    def _full_env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_") or k in PASSED_THROUGH}
        return {
            **base,
            "ANVIL_DATA_DIR": str(self.data_dir),
            "ANVIL_LOG_LEVEL": "warning",
            **ROOMY,
            **self.env,
        }


def _log_record(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return line[:300]
    if not isinstance(record, dict):
        return line[:300]
    text = f"{record.get('time', '')} {record.get('level', '')} {record.get('message', '')}"
    exception = str(record.get("exception") or "").strip().splitlines()
    return f"{text} | {exception[-1]}" if exception else text


@contextmanager
def model_server(delay: Callable[[], float] | float) -> Iterator[FakeOpenAI]:
    """The local OpenAI-protocol server, answering every request after `delay` seconds."""
    with running_openai() as fake:
        fake.delay = delay
        yield fake


class Arrivals:
    """Which questions have reached the model: the question ends the last message of both the
    standalone-query request and the answer request the `openai` engine sends."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self._fake = fake
        self._seen = len(fake.requests)
        self._questions: set[str] = set()

    def _scan(self) -> None:
        requests = self._fake.requests
        end = len(requests)
        for request in requests[self._seen : end]:
            content = str(request.messages[-1].get("content", ""))
            for marker in ("Last question: ", "Question: "):
                _, found, tail = content.rpartition(marker)
                if found:
                    self._questions.add(tail)
                    break
        self._seen = end

    async def wait_for(
        self,
        questions: Sequence[str],
        seconds: float = ARRIVAL_TIMEOUT,
        settled: Callable[[str], bool] = lambda _: False,
    ) -> bool:
        """Whether all `questions` reached the model (or are `settled`: answered without it, or
        cut off) within `seconds` (polled)."""
        deadline = time.monotonic() + seconds
        while True:
            self._scan()
            if all(q in self._questions or settled(q) for q in questions):
                return True
            if time.monotonic() > deadline:
                return False
            await anyio.sleep(0.005)  # polling interval of a condition with a deadline


# ---------------------------------------------------------------------------------------------
# What the client saw


@dataclass
class Op:
    """One request as the client saw it: when it was sent, when (and what) it was answered."""

    id: int
    kind: Kind
    user: str
    conversation: str | None
    server: int
    epoch: int
    start: float
    end: float = math.inf
    status: int | None = None
    body: Any = None
    error: str | None = None
    question: str | None = None
    client_request_id: str | None = None
    #: No answer because the process was killed: the op may or may not have taken effect.
    cut_off: bool = False
    #: The latest moment a cut-off op can have taken effect (infinite: no bound is known).
    bound: float = math.inf

    @property
    def expected(self) -> bool:
        """Answered with a status this operation answers when the service works."""
        if self.status is None:
            return False
        return self.status == 200 or (self.kind == "get" and self.status == 404)

    @property
    def latest(self) -> float:
        """The latest moment the op can have taken effect."""
        return self.end if self.expected else self.bound if self.cut_off else self.end

    @property
    def replayed(self) -> bool:
        return self.kind == "ask" and self.expected and "Replayed" in str(self.body.get("note") or "")

    @property
    def fresh(self) -> bool:
        """An ask answered as a new turn (not a replay)."""
        return self.kind == "ask" and self.expected and not self.replayed

    @property
    def turn(self) -> int | None:
        return int(self.body["turn"]) if self.kind == "ask" and self.expected else None

    def describe(self) -> str:
        what = {
            "ask": f"ask {self.question!r}"
            + (f" [{self.client_request_id}]" if self.client_request_id else ""),
            "get": "get",
            "list": "list",
            "delete": "delete",
            "delete_all": "delete-all",
        }[self.kind]
        where = f"{self.user}/{self.conversation}" if self.conversation else self.user
        if self.cut_off:
            outcome = "cut off by a kill"
        elif self.status is None:
            outcome = f"failed: {self.error}"
        else:
            outcome = f"{self.status} {_summary(self)}"
        return (
            f"#{self.id} {what} on {where} via p{self.server} [{self.start:.3f}..{self.end:.3f}]: {outcome}"
        )


def _summary(op: Op) -> str:
    body = op.body
    if not op.expected:
        return str(body)[:300]
    if op.kind == "ask":
        flags = " replayed" if op.replayed else ""
        return f"turn {body['turn']} created={body['created']}{flags}"
    if op.kind == "get":
        if op.status == 404:
            return "not found"
        return "turns " + ", ".join(f"{t['turn']}:{t['question']!r}" for t in body["turns"])
    if op.kind == "list":
        return ", ".join(f"{c['conversationId']}({c['turns']})" for c in body["conversations"]) or "none"
    return f"deleted={body['deleted']}"


@dataclass
class History:
    """Every op of one round, and the violations found so far."""

    ops: list[Op] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    #: Conversations whose linearizability search ran out of steps (their rules were checked).
    undecided: list[str] = field(default_factory=list)

    def new(self, **fields: Any) -> Op:
        op = Op(id=len(self.ops), **fields)
        self.ops.append(op)
        return op


# ---------------------------------------------------------------------------------------------
# The schedule


@dataclass(frozen=True)
class Ask:
    conversation: tuple[str, str]
    question: str
    client_request_id: str | None
    #: The same request sent twice at once, as a client that retries too early does.
    twice: bool = False


@dataclass(frozen=True)
class Get:
    conversation: tuple[str, str]


@dataclass(frozen=True)
class ListMine:
    user: str


@dataclass(frozen=True)
class Delete:
    conversation: tuple[str, str]


@dataclass(frozen=True)
class DeleteAll:
    user: str


@dataclass(frozen=True)
class Burst:
    """Several asks on one conversation at once; once all of them reach the model (having read
    the conversation), `then` runs: the delete-while-answering race."""

    asks: tuple[Ask, ...]
    then: tuple[Get | Delete | DeleteAll, ...]


Step = Ask | Get | ListMine | Delete | DeleteAll | Burst


@dataclass(frozen=True)
class Kill:
    """After `after` steps of the round have finished, SIGKILL process `process` and restart it."""

    after: int
    process: int


@dataclass(frozen=True)
class Plan:
    seed: int
    users: tuple[str, ...]
    conversations: tuple[tuple[str, str], ...]
    #: Each worker's steps, run one after the other; the workers run at once.
    workers: tuple[tuple[tuple[Step, int], ...], ...]
    kills: tuple[Kill, ...]

    @property
    def steps(self) -> int:
        return sum(len(w) for w in self.workers)


def make_plan(
    seed: int,
    *,
    namespace: str,
    processes: int,
    workers: int = 4,
    steps: int = 30,
    kills: int = 0,
    users: int = 2,
    conversations: int = 3,
) -> Plan:
    """The schedule of a round: a pure function of its arguments. Each step comes with the
    process (index) it prefers; `namespace` keeps rounds sharing a store apart."""
    rng = random.Random(seed)
    user_names = tuple(f"{namespace}-u{i}" for i in range(users))
    # The same conversation ids for every user: one user's turns must never show in another's.
    ids = tuple(f"c{j}" for j in range(conversations))
    keys = tuple((u, c) for u in user_names for c in ids)
    # One conversation gets half of the traffic, so races on it are frequent.
    weights = [len(keys) - 1] + [1] * (len(keys) - 1)
    counter = iter(range(10**6))

    def question() -> str:
        # Fixed width: no question ends with another one (see `Arrivals`).
        return f"What about {namespace}-{next(counter):05d}?"

    def conversation() -> tuple[str, str]:
        return rng.choices(keys, weights)[0]

    plans = []
    for w in range(workers):
        mine: list[tuple[Step, int]] = []
        retry_keys: list[Ask] = []
        for s in range(steps):
            roll = rng.random()
            step: Step
            if roll < 0.22:
                step = Ask(conversation(), question(), None)
            elif roll < 0.40:
                step = Ask(conversation(), question(), f"w{w}s{s}")
                retry_keys.append(step)
            elif roll < 0.47 and retry_keys:
                step = rng.choice(retry_keys)  # the same arguments again: a retry
            elif roll < 0.51:
                step = Ask(conversation(), question(), f"w{w}s{s}", twice=True)
                retry_keys.append(Ask(step.conversation, step.question, step.client_request_id))
            elif roll < 0.67:
                step = Get(conversation())
            elif roll < 0.73:
                step = ListMine(rng.choice(user_names))
            elif roll < 0.83:
                step = Delete(conversation())
            elif roll < 0.85:
                step = DeleteAll(rng.choice(user_names))
            else:
                key = conversation()
                asks = tuple(
                    Ask(key, question(), f"w{w}s{s}b{b}" if rng.random() < 0.5 else None)
                    for b in range(rng.randint(3, 7))
                )
                retry_keys.extend(a for a in asks if a.client_request_id)
                then: list[Get | Delete | DeleteAll] = [
                    Delete(key) if rng.random() < 0.85 else DeleteAll(key[0])
                ]
                then.extend(Get(key) for _ in range(rng.randint(0, 2)))
                step = Burst(asks, tuple(then))
            mine.append((step, rng.randrange(processes)))
        plans.append(tuple(mine))
    total = workers * steps
    planned_kills = tuple(
        sorted(
            (Kill(rng.randint(total // 6, total * 5 // 6), rng.randrange(processes)) for _ in range(kills)),
            key=lambda k: k.after,
        )
    )
    return Plan(seed, user_names, keys, tuple(plans), planned_kills)


# ---------------------------------------------------------------------------------------------
# Running a round


class Driver:
    """Runs a plan's steps against a cluster and records every op in a `History`."""

    def __init__(self, cluster: Cluster, http: httpx.AsyncClient, fake: FakeOpenAI, plan: Plan) -> None:
        self.cluster = cluster
        self.http = http
        self.fake = fake
        self.plan = plan
        self.history = History()
        self.done = 0
        self._headers = {u: {"Authorization": f"Bearer {cluster.token(u)}"} for u in plan.users}
        self._kill_due = [anyio.Event() for _ in plan.kills]

    async def run(self) -> History:
        async with anyio.create_task_group() as group:
            group.start_soon(self._chaos)
            async with anyio.create_task_group() as workers:
                for steps in self.plan.workers:
                    workers.start_soon(self._work, steps)
            for event in self._kill_due:  # kills planned past the last step still happen
                event.set()
        await self._final_reads()
        return self.history

    async def _chaos(self) -> None:
        for kill, due in zip(self.plan.kills, self._kill_due, strict=True):
            await due.wait()
            await self.cluster.kill_and_restart(kill.process)

    async def _work(self, steps: Sequence[tuple[Step, int]]) -> None:
        for step, prefer in steps:
            await self._step(step, prefer)
            self.done += 1
            for kill, due in zip(self.plan.kills, self._kill_due, strict=True):
                if self.done >= kill.after:
                    due.set()

    async def _step(self, step: Step, prefer: int) -> None:
        if isinstance(step, Ask):
            if step.twice:
                async with anyio.create_task_group() as group:
                    group.start_soon(self.ask, step, prefer)
                    group.start_soon(self.ask, step, prefer + 1)
            else:
                await self.ask(step, prefer)
        elif isinstance(step, Burst):
            await self._burst(step, prefer)
        else:
            await self._simple(step, prefer)

    async def _simple(self, step: Get | ListMine | Delete | DeleteAll, prefer: int) -> None:
        if isinstance(step, Get):
            await self.get(step.conversation, prefer)
        elif isinstance(step, ListMine):
            await self.list(step.user, prefer)
        elif isinstance(step, Delete):
            await self.delete(step.conversation, prefer)
        else:
            await self.delete_all(step.user, prefer)

    async def _burst(self, burst: Burst, prefer: int) -> None:
        arrivals = Arrivals(self.fake)
        finished: set[str] = set()

        async def ask(step: Ask, n: int) -> None:
            try:
                await self.ask(step, prefer + n)
            finally:
                finished.add(step.question)

        async def follow() -> None:
            await arrivals.wait_for([a.question for a in burst.asks], settled=finished.__contains__)
            for n, step in enumerate(burst.then):
                await self._simple(step, prefer + n)

        async with anyio.create_task_group() as group:
            for n, step in enumerate(burst.asks):
                group.start_soon(ask, step, n)
            group.start_soon(follow)

    async def ask(self, step: Ask, prefer: int) -> None:
        user, conversation = step.conversation
        body: dict[str, Any] = {"question": step.question, "conversationId": conversation}
        if step.client_request_id is not None:
            body["clientRequestId"] = step.client_request_id
        op = await self._send(
            "ask",
            user,
            conversation,
            prefer,
            "POST",
            "/api/ask",
            json=body,
            question=step.question,
            client_request_id=step.client_request_id,
        )
        if op.cut_off and step.client_request_id is not None:
            # What a client does when the answer is lost: the same request again, elsewhere.
            await self._send(
                "ask",
                user,
                conversation,
                prefer + 1,
                "POST",
                "/api/ask",
                json=body,
                question=step.question,
                client_request_id=step.client_request_id,
            )

    async def get(self, key: tuple[str, str], prefer: int) -> Op:
        user, conversation = key
        return await self._send(
            "get", user, conversation, prefer, "GET", f"/api/conversations/{conversation}"
        )

    async def list(self, user: str, prefer: int) -> Op:
        return await self._send(
            "list", user, None, prefer, "GET", "/api/conversations", params={"limit": 100}
        )

    async def delete(self, key: tuple[str, str], prefer: int) -> Op:
        user, conversation = key
        return await self._send(
            "delete", user, conversation, prefer, "DELETE", f"/api/conversations/{conversation}"
        )

    async def delete_all(self, user: str, prefer: int) -> Op:
        return await self._send("delete_all", user, None, prefer, "DELETE", "/api/conversations")

    async def _final_reads(self) -> None:
        """With nothing in flight and every process up: read every conversation and listing."""
        await self.cluster.wait_live()
        for n, key in enumerate(self.plan.conversations):
            await self.get(key, n)
        for n, user in enumerate(self.plan.users):
            await self.list(user, n)

    async def _send(
        self,
        kind: Kind,
        user: str,
        conversation: str | None,
        prefer: int,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        question: str | None = None,
        client_request_id: str | None = None,
    ) -> Op:
        index, url = await self._pick(prefer)
        op = self.history.new(
            kind=kind,
            user=user,
            conversation=conversation,
            server=index,
            epoch=self.cluster.epochs[index],
            start=time.monotonic(),
            question=question,
            client_request_id=client_request_id,
        )
        try:
            response = await self.http.request(
                method, url + path, json=json, params=params, headers=self._headers[user]
            )
        except httpx.TransportError as error:
            op.end = time.monotonic()
            op.error = f"{type(error).__name__}: {error}"
            if self.cluster.epochs[index] != op.epoch:
                op.cut_off = True
                reaped = self.cluster.reaped_at.get((index, op.epoch))
                # A SQLite write is the process's own: none lands after it is reaped. A Cosmos
                # DB request it had sent may still be served after that, so no bound is known.
                op.bound = reaped if reaped is not None and self.cluster.store == "sqlite" else math.inf
            else:
                self.history.violations.append(f"{op.describe()}: the connection failed with no kill")
            return op
        op.end = time.monotonic()
        op.status = response.status_code
        try:
            op.body = response.json()
        except ValueError:
            op.body = response.text
        if not op.expected:
            kind_of = "a server error" if op.status >= 500 else "an unexpected status"
            self.history.violations.append(f"{op.describe()}: {kind_of}")
        elif kind == "list" and op.body.get("nextCursor"):
            self.history.violations.append(
                f"{op.describe()}: more than one page for a handful of conversations"
            )
        return op

    async def _pick(self, prefer: int) -> tuple[int, str]:
        while True:
            live = self.cluster.live()
            if live:
                index = prefer % self.cluster.size
                if index not in live:
                    index = live[prefer % len(live)]
                url = self.cluster.url(index)
                if url is not None:
                    return index, url
            await self.cluster.wait_live()


async def run_round(cluster: Cluster, fake: FakeOpenAI, plan: Plan) -> History:
    """Run `plan` on `cluster` and check what came back; the history carries the violations."""
    # Idle connections are dropped before the server's keep-alive timeout (5 s) could close one
    # under a request being sent on it, which would look like a failure.
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50, keepalive_expiry=2.0)
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=limits) as http:
        history = await Driver(cluster, http, fake, plan).run()
    history.violations.extend(check(history, history.undecided))
    return history


# ---------------------------------------------------------------------------------------------
# The checks


def check(history: History, undecided: list[str] | None = None) -> list[str]:
    """Every way the history breaks the model (empty when it holds). Conversations the
    linearizability search could not decide within its budget are added to `undecided`."""
    ops = history.ops
    keys = sorted({(op.user, op.conversation) for op in ops if op.conversation is not None})
    users = sorted({op.user for op in ops})
    problems: list[str] = []
    per_key: dict[tuple[str, str], Conversation] = {}
    for key in keys:
        view = Conversation(key, ops)
        per_key[key] = view
        found = view.check()
        if not found:
            verdict = view.linearizable()
            if verdict is None and undecided is not None:
                undecided.append(view.name)
            if verdict is False:
                found = [
                    f"{key[0]}/{key[1]}: no order of its operations, each between its request and its "
                    "answer, gives the answers seen (see the operations below)"
                ]
        problems.extend(found)
    for user in users:
        problems.extend(_check_user(user, [v for k, v in per_key.items() if k[0] == user], ops))
    return problems


class Conversation:
    """The ops that concern one conversation (deletes of all the user's conversations too)."""

    def __init__(self, key: tuple[str, str], ops: Sequence[Op]) -> None:
        self.key = key
        user, cid = key
        self.asks = [op for op in ops if op.kind == "ask" and op.conversation == cid and op.user == user]
        self.deletes = [
            op
            for op in ops
            if op.user == user
            and (op.kind == "delete_all" or (op.kind == "delete" and op.conversation == cid))
        ]
        self.gets = [op for op in ops if op.kind == "get" and op.user == user and op.conversation == cid]
        self.lists = [op for op in ops if op.kind == "list" and op.user == user and op.expected]
        self.questions: dict[str, list[Op]] = {}
        for op in self.asks:
            assert op.question is not None
            self.questions.setdefault(op.question, []).append(op)
        self.name = f"{user}/{cid}"

    # -- when a question can be, or must be, in the conversation

    def may_hold(self, question: str, start: float, end: float, besides: Op | None = None) -> bool:
        """Whether a read over [start, end] may see `question`: some ask of it may have written
        it before `end`, and no delete surely ran between that write and `start`."""
        for ask in self.questions.get(question, ()):
            if ask.replayed or (ask.status is not None and not ask.expected and ask.status < 500):
                continue  # a replay or a refusal writes nothing
            if ask.start >= end:
                continue
            latest = ask.latest
            if not any(
                d is not besides and d.expected and d.start > latest and d.end < start for d in self.deletes
            ):
                return True
        return False

    def must_hold(self, question: str, start: float, end: float, besides: Op | None = None) -> Op | None:
        """An ask of `question` acknowledged before `start` that no delete can have undone before
        `end` (one that ended before the ask began cannot); None when there is none."""
        for ask in self.questions.get(question, ()):
            if not ask.expected or ask.end >= start:
                continue
            if not any(d is not besides and d.latest > ask.start and d.start < end for d in self.deletes):
                return ask
        return None

    def check(self) -> list[str]:
        problems: list[str] = []
        problems.extend(self._check_asks())
        for op in self.gets:
            if op.expected:
                problems.extend(self._check_read(op))
        for op in self.deletes:
            if op.kind == "delete" and op.expected:
                problems.extend(self._check_delete(op))
        return [f"{self.name}: {p}" for p in problems]

    def _check_asks(self) -> list[str]:
        problems = []
        fresh = [a for a in self.asks if a.fresh]
        for ask in fresh:
            if bool(ask.body["created"]) != (ask.turn == 1):
                problems.append(f"{ask.describe()}: created must be true exactly on turn 1")
        for i, first in enumerate(fresh):
            for second in fresh[i + 1 :]:
                if self._delete_may_fall_between(first, second):
                    continue
                if first.question == second.question:
                    problems.append(
                        f"{first.describe()} and {second.describe()}: the same clientRequestId added "
                        "two turns, with no delete between them"
                    )
                elif first.turn == second.turn:
                    problems.append(
                        f"{first.describe()} and {second.describe()}: two asks acknowledged as the same "
                        "turn with no delete between them (one turn was overwritten)"
                    )
        return problems

    def _delete_may_fall_between(self, a: Op, b: Op) -> bool:
        return any(
            (d.latest > a.start and d.start < b.end) or (d.latest > b.start and d.start < a.end)
            for d in self.deletes
        )

    def _check_read(self, op: Op) -> list[str]:
        turns = [] if op.status == 404 else op.body["turns"]
        problems = []
        numbers = [t["turn"] for t in turns]
        if numbers != list(range(1, len(turns) + 1)):
            problems.append(f"{op.describe()}: turns must number 1..{len(turns)} with no gap")
        seen: set[str] = set()
        for t in turns:
            question = t["question"]
            if question in seen:
                problems.append(f"{op.describe()}: {question!r} appears twice")
                continue
            seen.add(question)
            if question not in self.questions:
                problems.append(f"{op.describe()}: {question!r} was never asked in this conversation")
            elif not self.may_hold(question, op.start, op.end):
                problems.append(
                    f"{op.describe()}: {question!r} is back, though a delete that started after its ask "
                    f"was answered had finished before this read ({self._deleted_by(question, op)})"
                )
            else:
                numbers_acknowledged = {a.turn for a in self.questions[question] if a.expected}
                if (
                    all(a.expected for a in self.questions[question])
                    and t["turn"] not in numbers_acknowledged
                ):
                    problems.append(
                        f"{op.describe()}: {question!r} is turn {t['turn']}, but its ask was answered "
                        f"as turn {sorted(n for n in numbers_acknowledged if n is not None)}"
                    )
        problems.extend(self._check_missing(op, seen))
        return problems

    def _check_missing(self, op: Op, present: set[str]) -> list[str]:
        problems = []
        for question in self.questions:
            if question in present:
                continue
            ask = self.must_hold(question, op.start, op.end, besides=op)
            if ask is not None:
                problems.append(
                    f"{op.describe()}: turn {ask.turn} of {question!r} is missing, and no delete may "
                    f"have run since its ask ({ask.describe()}) began"
                )
        return problems

    def _check_delete(self, op: Op) -> list[str]:
        if op.body["deleted"]:
            if not any(self.may_hold(q, op.start, op.end, besides=op) for q in self.questions):
                return [f"{op.describe()}: deleted a conversation that cannot have existed"]
            return []
        return self._check_missing(op, set())

    def _deleted_by(self, question: str, read: Op) -> str:
        for d in self.deletes:
            if (
                d.expected
                and d.end < read.start
                and all(d.start > a.latest for a in self.questions[question] if not a.replayed)
            ):
                return d.describe()
        return "?"

    # -- the linearizability check

    def linearizable(self) -> bool | None:
        """Whether some order of the ops explains every answer (None: the search ran out)."""
        steps = self._model_steps()
        return _search(steps)

    def _model_steps(self) -> list[_Step]:
        cid = self.key[1]
        steps: list[_Step] = []
        for ask in self.asks:
            if ask.status is not None and not ask.expected and ask.status < 500:
                continue  # refused before anything was written
            steps.append(_Step(ask.start, ask.latest, ask.expected, _ask_effect(ask)))
        for d in self.deletes:
            if d.status is not None and not d.expected and d.status < 500:
                continue
            observed = d.body["deleted"] if d.kind == "delete" and d.expected else None
            steps.append(_Step(d.start, d.latest, d.expected, _delete_effect(observed)))
        for get in self.gets:
            if get.expected:
                seen = () if get.status == 404 else tuple(t["question"] for t in get.body["turns"])
                steps.append(_Step(get.start, get.end, True, _read_effect(seen)))
        for listing in self.lists:
            counts = {c["conversationId"]: c["turns"] for c in listing.body["conversations"]}
            steps.append(_Step(listing.start, listing.end, True, _count_effect(counts.get(cid))))
        steps.sort(key=lambda s: s.start)
        return steps


def _check_user(user: str, views: Sequence[Conversation], ops: Sequence[Op]) -> list[str]:
    """Listings and delete-all counts of one user against what each conversation may hold."""
    problems = []
    for op in ops:
        if op.user != user or not op.expected or op.kind not in ("list", "delete_all"):
            continue
        if op.kind == "list":
            listed = {c["conversationId"]: c["turns"] for c in op.body["conversations"]}
            for view in views:
                cid = view.key[1]
                may = sum(view.may_hold(q, op.start, op.end) for q in view.questions)
                must = [q for q in view.questions if view.must_hold(q, op.start, op.end)]
                if cid in listed and not must and not may:
                    problems.append(f"{op.describe()}: lists {cid}, which cannot exist")
                elif cid in listed and not len(must) <= listed[cid] <= may:
                    problems.append(
                        f"{op.describe()}: lists {cid} with {listed[cid]} turns; it must have at least "
                        f"{len(must)} and can have at most {may}"
                    )
                elif cid not in listed and must:
                    problems.append(f"{op.describe()}: leaves out {cid}, which holds {must[0]!r}")
            unknown = set(listed) - {v.key[1] for v in views}
            if unknown:
                problems.append(f"{op.describe()}: lists conversations never asked in: {sorted(unknown)}")
        else:
            could = sum(any(v.may_hold(q, op.start, op.end, besides=op) for q in v.questions) for v in views)
            surely = sum(
                any(v.must_hold(q, op.start, op.end, besides=op) for q in v.questions) for v in views
            )
            if not surely <= op.body["deleted"] <= could:
                problems.append(
                    f"{op.describe()}: {surely} to {could} conversations can have been there to delete"
                )
    return problems


# -- Wing and Gong's search, with memory of the (done, state) pairs already tried

State = tuple[tuple[str, str | None], ...]
Effect = Callable[[State], State | None]


@dataclass(frozen=True)
class _Step:
    start: float
    #: The latest moment it can take effect (infinite for an op cut off with no known bound).
    end: float
    #: Answered: it took effect, and its answer must match. Otherwise it may be left out.
    required: bool
    effect: Effect


def _ask_effect(op: Op) -> Effect:
    question, key = op.question or "", op.client_request_id
    answered = op.expected
    replayed, turn = op.replayed, op.turn

    def effect(state: State) -> State | None:
        if key is not None:
            for number, (_, earlier) in enumerate(state, start=1):
                if earlier == key:
                    return state if not answered or (replayed and turn == number) else None
        if answered and (replayed or turn != len(state) + 1):
            return None
        return (*state, (question, key))

    return effect


def _delete_effect(observed: bool | None) -> Effect:
    def effect(state: State) -> State | None:
        return () if observed is None or observed == bool(state) else None

    return effect


def _read_effect(seen: tuple[str, ...]) -> Effect:
    def effect(state: State) -> State | None:
        return state if tuple(q for q, _ in state) == seen else None

    return effect


def _count_effect(turns: int | None) -> Effect:
    def effect(state: State) -> State | None:
        return state if (turns is None and not state) or (turns is not None and len(state) == turns) else None

    return effect


def _search(steps: Sequence[_Step], budget: int = SEARCH_BUDGET) -> bool | None:
    """Depth-first search for an order of `steps` (sorted by start) consistent with real time:
    a step goes next only if no step still pending had to take effect before it began."""
    required = 0
    for i, step in enumerate(steps):
        if step.required:
            required |= 1 << i
    tried: set[tuple[int, State]] = set()
    stack: list[tuple[int, State]] = [(0, ())]
    work = 0
    while stack:
        done, state = stack.pop()
        if done & required == required:
            return True
        if (done, state) in tried:
            continue
        tried.add((done, state))
        work += 1
        if work > budget:
            return None
        pending = [i for i in range(len(steps)) if not done >> i & 1]
        horizon = min(steps[i].end for i in pending)
        moves: list[tuple[int, State]] = []
        # Pushed in reverse order of preference: the earliest-ending required step is tried first.
        for i in pending:
            step = steps[i]
            if step.start > horizon:
                break  # sorted by start: none after this one may go next either
            after = step.effect(state)
            if after is not None:
                moves.append((i, after))
        optional = [i for i in pending if not steps[i].required and steps[i].end == horizon]
        for i in optional:
            stack.append((done | 1 << i, state))  # left out: it never took effect
        moves.sort(key=lambda m: (steps[m[0]].required, -steps[m[0]].end))
        for i, after in moves:
            stack.append((done | 1 << i, after))
    return False


# ---------------------------------------------------------------------------------------------
# Reports


def report(history: History, plan: Plan, setup: str, limit: int = 12) -> str:
    """The violations, the seed that replays the round, and the operations of each conversation
    a violation names."""
    lines = [
        f"{len(history.violations)} violation(s) of the history model, {setup}, seed {plan.seed} "
        f"(replay with ANVIL_MODEL_SEED={plan.seed}):"
    ]
    lines.extend(f"  - {v}" for v in history.violations[:limit])
    if len(history.violations) > limit:
        lines.append(f"  ... and {len(history.violations) - limit} more")
    named = [key for key in plan.conversations if any(f"{key[0]}/{key[1]}" in v for v in history.violations)]
    for user, cid in named[:2]:
        lines.append(f"operations on {user}/{cid} and its user's lists and delete-alls:")
        for op in history.ops:
            if op.user == user and (op.conversation in (cid, None)):
                lines.append(f"    {op.describe()}")
    return "\n".join(lines)


def fresh_namespace() -> str:
    """A prefix no earlier round used, for users and questions (stores outlive rounds)."""
    return f"m{uuid.uuid4().hex[:10]}"


def new_seed() -> int:
    return random.SystemRandom().randrange(10**9)
