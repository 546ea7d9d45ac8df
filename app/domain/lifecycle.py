"""ConversationService: start, list, read back and delete a signed-in user's conversations.

Every operation is scoped to the caller's `oid`, and a conversation stored under another tenant
(`tid`) is treated exactly like a missing one, so another user's conversation is
indistinguishable from one that does not exist.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.domain.conversation import (
    Conversation,
    ConversationPage,
    Turn,
    conversation_key,
)
from app.domain.ports import ConversationStore, InvalidCursor, QuotaFull, VersionConflict
from app.domain.principal import Principal
from app.domain.quota import ensure_room, quota_exceeded
from app.domain.turn_queue import TurnQueue
from app.errors import Conflict, InvalidInput, NotFound, SignInRequired

MAX_TITLE_CHARS = 200
MAX_LIST_LIMIT = 100
DEFAULT_LIST_LIMIT = 20
MAX_TURNS_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class StartedConversation:
    conversation_id: str
    title: str | None
    expires_at: float


def mint_conversation_id() -> str:
    """An opaque id with 144 bits of randomness that fits the conversationId pattern."""
    return secrets.token_urlsafe(18)


def not_found(conversation_id: str) -> NotFound:
    return NotFound(
        f"conversation {conversation_id!r} was not found or has expired: call ask without "
        "conversationId for a one-shot answer, or start_conversation to begin a new one."
    )


class ConversationService:
    """Lifecycle of conversations; the turns themselves are added by `AskService`."""

    def __init__(
        self,
        store: ConversationStore,
        *,
        ttl_seconds: int,
        max_conversations: int | None = None,
        clock: Callable[[], float] = time.time,
        writers: TurnQueue | None = None,
    ) -> None:
        self.store = store
        #: The `AskService`'s queue of writers, told of every delete (`TurnQueue.forget`).
        self.writers = writers or TurnQueue()
        self.ttl_seconds = ttl_seconds
        #: How many live conversations one user may keep (None: no limit).
        self.max_conversations = max_conversations
        self._clock = clock

    async def start(
        self, principal: Principal | None, *, instructions: str | None = None, title: str | None = None
    ) -> StartedConversation:
        """Create an empty conversation under a server-minted id, with optional instructions and title."""
        user = _require_user(principal, "Starting a conversation")
        await ensure_room(self.store, user.oid, user.tid, self.max_conversations)
        now = self._clock()
        for _ in range(3):  # a collision of 144 random bits does not happen; still, never overwrite
            conversation = Conversation(
                oid=user.oid,
                tid=user.tid,
                conversation_id=mint_conversation_id(),
                created_at=now,
                updated_at=now,
                expires_at=now + self.ttl_seconds,
                version=1,
                instructions=instructions,
                title=title,
            )
            try:
                await self.store.create(conversation, max_conversations=self.max_conversations)
            except VersionConflict:
                continue
            except QuotaFull as full:
                raise quota_exceeded(full.kept, self.max_conversations) from None
            return StartedConversation(conversation.conversation_id, title, conversation.expires_at)
        raise Conflict("could not mint a fresh conversationId; call start_conversation again.")

    async def list(
        self, principal: Principal | None, *, limit: int | None = None, cursor: str | None = None
    ) -> ConversationPage:
        """The caller's conversations, most recently updated first."""
        user = _require_user(principal, "Listing conversations")
        size = DEFAULT_LIST_LIMIT if limit is None else limit
        try:
            page = await self.store.list(user.oid, user.tid, limit=size, cursor=cursor)
        except InvalidCursor:
            raise InvalidInput(
                "cursor is not one this server issued: pass the nextCursor of the previous page unchanged, "
                "or omit cursor to start from the newest conversation."
            ) from None
        return page

    async def get(
        self, principal: Principal | None, conversation_id: str, *, limit: int | None = None
    ) -> tuple[Conversation, tuple[Turn, ...]]:
        """The conversation and its latest `limit` turns (all kept turns when omitted), oldest first."""
        user = _require_user(principal, "Reading a conversation")
        found = await self.store.get(user.oid, conversation_id)
        if found is None or found.conversation.tid != user.tid:
            raise not_found(conversation_id)
        conversation = found.conversation
        turns = conversation.turns if limit is None else conversation.turns[-limit:]
        return conversation, turns

    async def delete(self, principal: Principal | None, conversation_id: str) -> bool:
        """Delete one conversation; False when there was nothing (of the caller's) to delete."""
        user = _require_user(principal, "Deleting a conversation")
        found = await self.store.get(user.oid, conversation_id)
        if found is None or found.conversation.tid != user.tid:
            return False
        try:
            return await self.store.delete(user.oid, conversation_id, if_match=found.etag)
        finally:
            self.writers.forget(conversation_key(user.oid, conversation_id))

    async def delete_all(self, principal: Principal | None) -> int:
        """Delete every conversation of the caller; returns how many there were."""
        user = _require_user(principal, "Deleting conversations")
        try:
            return await self.store.delete_all(user.oid, user.tid)
        finally:
            self.writers.forget_user(user.oid)


def _require_user(principal: Principal | None, operation: str) -> Principal:
    if principal is None:
        raise SignInRequired(
            f"{operation} needs a signed-in user, and this caller is anonymous: sign in, or use ask "
            "without conversationId for one-shot answers."
        )
    return principal
