"""Running one round of the history model (`support.history_model`): the schedule's operations
sent to the cluster as they come due, and what the client saw of each (`Op`, `History`)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx

from support.history_cluster import Arrivals, Cluster
from support.history_schedule import Ask, Burst, Delete, DeleteAll, Get, ListMine, Plan, Step
from support.openai_server import FakeOpenAI

Kind = Literal["ask", "get", "list", "delete", "delete_all"]

#: Longest wait for any one request; a request that takes longer is a hang, reported as such.
REQUEST_TIMEOUT = 60.0


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
