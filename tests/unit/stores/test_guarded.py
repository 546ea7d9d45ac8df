"""`GuardedStore`: a call past the deadline is a 503 naming it; a failure that is not "busy" is
logged once per cause with what to do and fails readiness until a write succeeds again (the
next write, or the readiness check's own); busy is neither."""

from __future__ import annotations

import logging

import anyio
import pytest

from app.domain.conversation import Conversation
from app.errors import StoreFailed, Unavailable
from app.stores.guarded import GuardedStore
from app.stores.memory import MemoryStore

pytestmark = pytest.mark.anyio

FULL = StoreFailed(
    "The conversation store cannot write; retry later.", cause="disk-full", remedy="free space"
)


class Ailing(MemoryStore):
    """A memory store whose writes (and writing checks) fail with `failure` until `repaired`, and
    whose reads hang while `frozen`."""

    def __init__(self) -> None:
        super().__init__()
        self.failure: Exception | None = None
        self.frozen = False
        self.checks: list[bool] = []

    async def get(self, oid: str, conversation_id: str):  # type: ignore[no-untyped-def]
        if self.frozen:
            await anyio.sleep_forever()
        return await super().get(oid, conversation_id)

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        if self.failure is not None:
            raise self.failure
        return await super().create(conversation, max_conversations=max_conversations)

    async def check(self, *, write: bool = False) -> None:
        self.checks.append(write)
        if write and self.failure is not None:
            raise self.failure


def conversation(name: str) -> Conversation:
    return Conversation("oid", "tid", name, 0.0, 0.0, 1e12)


async def test_a_call_past_the_deadline_is_a_503_that_names_it() -> None:
    inner = Ailing()
    inner.frozen = True
    store = GuardedStore(inner, timeout=0.05)
    with pytest.raises(StoreFailed) as failed:
        await store.get("oid", "c")
    assert failed.value.cause == "timeout" and failed.value.retry_after == 0.05
    assert failed.value.message == "The conversation store did not answer within 0.05 s; retry shortly."
    assert failed.value.headers() == {"Retry-After": "1"}


async def test_a_failure_is_logged_once_per_cause_and_fails_readiness_until_a_write_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = Ailing()
    store = GuardedStore(inner, timeout=5)
    await store.check()
    assert inner.checks == [False]  # while it works, the check does not write
    inner.failure = FULL
    for name in ("a", "b", "c"):
        with pytest.raises(StoreFailed):
            await store.create(conversation(name))
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "The conversation store is failing (disk-full): The conversation store cannot write; retry "
        "later.; free space. Readiness reports it until a write succeeds again."
    ]
    with pytest.raises(StoreFailed):
        await store.check()
    assert inner.checks[-1] is True  # failing, the check tries a write
    assert await store.get("oid", "a") is None  # reads still answer meanwhile

    inner.failure = None
    await store.create(conversation("d"))
    assert store.failing == {}
    await store.check()
    assert inner.checks[-1] is False
    assert any("writes again (it was failing: disk-full)" in r.getMessage() for r in caplog.records)


async def test_readiness_comes_back_by_its_own_write_when_no_write_comes() -> None:
    inner = Ailing()
    store = GuardedStore(inner, timeout=5)
    inner.failure = FULL
    with pytest.raises(StoreFailed):
        await store.create(conversation("a"))
    inner.failure = None  # space freed; a replica out of rotation gets no write to prove it
    await store.check()
    assert store.failing == {}


async def test_busy_is_neither_logged_nor_kept(caplog: pytest.LogCaptureFixture) -> None:
    inner = Ailing()
    inner.failure = Unavailable("The conversation store is busy; retry shortly.", retry_after=1.0)
    store = GuardedStore(inner, timeout=5)
    with pytest.raises(Unavailable):
        await store.create(conversation("a"))
    assert store.failing == {}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
