"""The domain's services over a memory store with an engine that answers only when told, so a
test can delete, or create more, while answers are being written."""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from app.domain.ask import AskService
from app.domain.ask_types import AskRequest
from app.domain.lifecycle import ConversationService
from app.domain.ports import Answer, Document, Passage, PastExchange, Progress
from app.domain.principal import Principal
from app.domain.turn_queue import TurnQueue
from app.stores.memory import MemoryStore

ALICE = Principal(oid="alice", tid="tenant-1", scopes=frozenset({"access_as_user"}), expires_at=2e9)


class GatedEngine:
    """Answers once `gate` is set, so a test can act while answers are being written."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.waiting = 0

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        self.waiting += 1
        await self.gate.wait()
        return Answer(f"answer to {question}")

    async def search(self, text: str, max_results: int) -> list[Passage]:
        return []

    async def fetch(self, source: str, max_chars: int) -> Document | None:
        return None


class Services:
    def __init__(self, *, max_conversations: int | None = None) -> None:
        self.store = MemoryStore()
        self.engine = GatedEngine()
        writers = TurnQueue()
        self.asks = AskService(self.store, self.engine, max_conversations=max_conversations, writers=writers)
        self.conversations = ConversationService(
            self.store, ttl_seconds=3600, max_conversations=max_conversations, writers=writers
        )

    async def questions(self, conversation_id: str = "c") -> list[str]:
        _, turns = await self.conversations.get(ALICE, conversation_id)
        return [t.question for t in turns]

    async def wait_for_answers(self, count: int) -> None:
        while self.engine.waiting < count:
            await anyio.lowlevel.checkpoint()

    async def seed(self, *questions: str) -> None:
        """Asks `questions` on conversation "c", answered at once; the gate is closed after."""
        self.engine.gate.set()
        for question in questions:
            await self.asks.ask(ALICE, AskRequest(question, "c"))
        self.engine.gate = anyio.Event()
        self.engine.waiting = 0
