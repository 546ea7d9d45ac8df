"""`GuardedStore`: any conversation store, each call bounded by a deadline, and its failures made
loud.

A call the store does not answer within `ANVIL_STORE_TIMEOUT_SECONDS` is answered 503 with
`Retry-After` (a frozen Cosmos DB once held each ask 88 s). A failure that is not a passing rush
(`StoreFailed`: a full disk, a read-only database file, refused credentials, no answer in time)
is logged at ERROR once per cause, with what to do, and makes the store's readiness check fail,
naming the cause, until a write succeeds again: the next write that succeeds, or the check
itself, which then tries one (`check(write=True)`), so a replica taken out of rotation by its
probe still comes back. The store keeps answering every call meanwhile: a disk that has room
again takes the next turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from app.domain.conversation import Conversation, ConversationPage
from app.domain.ports import ConversationStore, Stored
from app.errors import StoreFailed

_T = TypeVar("_T")

logger = logging.getLogger("app.stores")


class GuardedStore:
    """`inner` with a deadline of `timeout` seconds on every call (see the module)."""

    def __init__(self, inner: ConversationStore, timeout: float) -> None:
        self.inner = inner
        self.timeout = timeout
        #: The causes failing now, each with what to do; empty while the store works.
        self.failing: dict[str, str] = {}

    async def _call(self, call: Callable[[], Awaitable[_T]], *, write: bool = False) -> _T:
        try:
            # asyncio's own deadline, not anyio's: 3.6 µs a call against 8.3 (`timeit`, 50,000
            # calls), and a turn makes two or three store calls; Anvil runs on asyncio (uvicorn).
            async with asyncio.timeout(self.timeout):
                result = await call()
        except TimeoutError:
            failure = self._timed_out()
            self._failed(failure)
            raise failure from None
        except StoreFailed as failure:
            self._failed(failure)
            raise
        if write and self.failing:
            self._recovered()
        return result

    def _timed_out(self) -> StoreFailed:
        return StoreFailed(
            f"The conversation store did not answer within {self.timeout:g} s; retry shortly.",
            cause="timeout",
            remedy=(
                "check that the store is reachable and not overloaded; ANVIL_STORE_TIMEOUT_SECONDS "
                f"({self.timeout:g} s) bounds each call"
            ),
            retry_after=self.timeout,
        )

    def _failed(self, failure: StoreFailed) -> None:
        if failure.cause not in self.failing:
            logger.error(
                "The conversation store is failing (%s): %s; %s. Readiness reports it until a "
                "write succeeds again.",
                failure.cause,
                failure.message,
                failure.remedy,
            )
        self.failing[failure.cause] = failure.remedy

    def _recovered(self) -> None:
        logger.warning("The conversation store writes again (it was failing: %s)", ", ".join(self.failing))
        self.failing.clear()

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        return await self._call(lambda: self.inner.get(oid, conversation_id))

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        return await self._call(
            lambda: self.inner.create(conversation, max_conversations=max_conversations), write=True
        )

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        return await self._call(lambda: self.inner.replace(conversation, if_match=if_match), write=True)

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        return await self._call(
            lambda: self.inner.delete(oid, conversation_id, if_match=if_match), write=True
        )

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        return await self._call(lambda: self.inner.list(oid, tid, limit=limit, cursor=cursor))

    async def count(self, oid: str, tid: str) -> int:
        return await self._call(lambda: self.inner.count(oid, tid))

    async def delete_all(self, oid: str, tid: str) -> int:
        return await self._call(lambda: self.inner.delete_all(oid, tid), write=True)

    async def check(self, *, write: bool = False) -> None:
        """The store's own check, within the deadline; while a cause is failing, one that writes,
        which clears it when it passes (and the failing cause is raised while it does not)."""
        probe_write = write or bool(self.failing)
        await self._call(lambda: self.inner.check(write=probe_write), write=probe_write)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        # What a store offers beyond the port (Cosmos DB's `observe_request_charges`) stays offered.
        return getattr(self.inner, name)
