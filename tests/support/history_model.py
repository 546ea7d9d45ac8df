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

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from support.history_cluster import Cluster
from support.history_runner import REQUEST_TIMEOUT, Driver, History, Op
from support.history_schedule import Plan
from support.openai_server import FakeOpenAI

#: Search steps the linearizability check may take for one conversation before it gives up.
SEARCH_BUDGET = 200_000


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
# Running a round, then checking it


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
