"""The schedule of a history model round (`support.history_model`): which operations, on which
conversation, to which process, and when the kills come; a pure function of the seed."""

from __future__ import annotations

import random
from dataclasses import dataclass

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
