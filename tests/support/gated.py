"""The domain's services over a memory store with an engine that answers only when told, so a
test can delete, or create more, while answers are being written."""

from __future__ import annotations

import anyio

from app.domain.ask import AskService
from app.domain.ask_types import AskRequest
from app.domain.lifecycle import ConversationService
from app.domain.principal import Principal
from app.domain.turn_queue import TurnQueue
from app.stores.memory import MemoryStore
from support.scripted_engine import ScriptedEngine

ALICE = Principal(oid="alice", tid="tenant-1", scopes=frozenset({"access_as_user"}), expires_at=2e9)


class Services:
    def __init__(self, *, max_conversations: int | None = None) -> None:
        self.store = MemoryStore()
        self.engine = ScriptedEngine(gate=anyio.Event())
        writers = TurnQueue()
        self.asks = AskService(self.store, self.engine, max_conversations=max_conversations, writers=writers)
        self.conversations = ConversationService(
            self.store, ttl_seconds=3600, max_conversations=max_conversations, writers=writers
        )

    async def questions(self, conversation_id: str = "c") -> list[str]:
        _, turns = await self.conversations.get(ALICE, conversation_id)
        return [t.question for t in turns]

    async def seed(self, *questions: str) -> None:
        """Asks `questions` on conversation "c", answered at once; the gate is closed after."""
        self.engine.gate.set()
        for question in questions:
            await self.asks.ask(ALICE, AskRequest(question, "c"))
        self.engine.gate = anyio.Event()
        self.engine.calls.clear()
