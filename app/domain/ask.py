"""AskService: the history rule, applied the same way for every surface.

History is loaded and written only when the caller is a signed-in user AND names a
conversation; everything else is answered one-shot without a single store call. Turns are
applied optimistically: a write that loses a race re-reads the conversation and re-applies the
same answer on top, so no turn is lost or duplicated.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from app.domain.ask_types import AskRequest, AskResult
from app.domain.conversation import (
    Conversation,
    Turn,
    conversation_key,
)
from app.domain.ports import (
    Answer,
    AnswerEngine,
    ConversationStore,
    Progress,
    QuotaFull,
    Stored,
    VersionConflict,
)
from app.domain.principal import Principal
from app.domain.quota import ensure_room, quota_exceeded
from app.domain.receipts import find_receipt, request_digest
from app.domain.turn_queue import TurnQueue
from app.errors import Conflict, Unavailable

#: A write that keeps losing races gives up after this many attempts (each loss means another
#: turn landed, so the conversation is making progress).
MAX_WRITE_ATTEMPTS = 64


@dataclass(frozen=True, slots=True)
class HistoryLimits:
    """How much of a conversation is kept, and for how long after its last turn."""

    max_turns: int = 50
    max_bytes: int = 262_144
    ttl_seconds: int = 2_592_000


class AskService:
    """Answers questions and keeps conversations, knowing nothing of HTTP or MCP."""

    def __init__(
        self,
        store: ConversationStore,
        engine: AnswerEngine,
        *,
        limits: HistoryLimits | None = None,
        max_conversations: int | None = None,
        clock: Callable[[], float] = time.time,
        backoff: Callable[[int], float] | None = None,
        writers: TurnQueue | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.limits = limits or HistoryLimits()
        #: How many live conversations one user may keep (None: no limit).
        self.max_conversations = max_conversations
        self._clock = clock
        self._backoff = backoff or jittered_backoff
        #: Shared with the `ConversationService` of the same store, which tells it of deletes.
        self.writers = writers or TurnQueue()

    async def ask(
        self, principal: Principal | None, request: AskRequest, *, progress: Progress | None = None
    ) -> AskResult:
        """Answer `request`, continuing the named conversation when the history rule allows.

        `progress` is handed to the engine. An engine that fails raises before anything is
        written: a failed answer never changes a conversation.
        """
        if principal is None or request.conversation_id is None:
            return await self._one_shot(principal, request, progress)
        return await self._continue(principal, request, request.conversation_id, progress)

    async def _one_shot(
        self, principal: Principal | None, request: AskRequest, progress: Progress | None
    ) -> AskResult:
        answer = await self.engine.answer(request.question, (), request.instructions, progress=progress)
        if request.conversation_id is None:
            note = (
                "No conversationId was given, so this answer is one-shot and nothing was stored; "
                "pass a conversationId to start or continue a conversation."
            )
        else:
            note = (
                "conversationId was ignored because the caller is not signed in; this answer is "
                "one-shot and nothing was stored."
            )
        if request.client_request_id is not None:
            note += " clientRequestId was accepted, but one-shot answers keep no receipt."
        if answer.note:
            note += f" {answer.note}"
        return AskResult(answer.text, None, note, False, None, False, answer.sources, answer.usage)

    async def _continue(
        self, principal: Principal, request: AskRequest, conversation_id: str, progress: Progress | None
    ) -> AskResult:
        # Only a retry key needs a digest of the arguments it must repeat.
        digest = request_digest(request) if request.client_request_id is not None else None
        mark = self.writers.mark()
        read = await self._read(principal, request, conversation_id, digest)
        if isinstance(read, AskResult):
            return read
        stored, etag = read
        if stored is None:
            # Refused before the engine runs: a new conversation the user has no room for.
            await ensure_room(self.store, principal.oid, principal.tid, self.max_conversations)
        # Turns are immutable and carry `question` and `answer`: handed over without copies.
        history = stored.turns if stored else ()
        instructions = stored.instructions if stored else request.instructions
        # The engine runs outside any lock: a slow answer never holds up another turn.
        answer = await self.engine.answer(request.question, history, instructions, progress=progress)
        answered = stored
        # Writers of one conversation in this process take turns, so a busy conversation is a
        # queue instead of a storm of conflicting writes; conflicts with other processes are
        # retried with jittered backoff.
        async with self.writers.turn(conversation_key(principal.oid, conversation_id)) as turns:
            latest = turns.since(mark)
            if latest is not None:
                # The writer before us in this process wrote it while we answered: start from its
                # version rather than from our read, which would only conflict.
                checked = _check(principal, request, conversation_id, digest, latest)
                if isinstance(checked, AskResult):
                    return checked
                stored, etag = checked
            for attempt in range(MAX_WRITE_ATTEMPTS):
                if attempt:
                    if attempt > 1:
                        await anyio.sleep(self._backoff(attempt))
                    read = await self._read(principal, request, conversation_id, digest)
                    if isinstance(read, AskResult):
                        return read
                    stored, etag = read
                now = self._clock()
                base = stored or Conversation(
                    oid=principal.oid,
                    tid=principal.tid,
                    conversation_id=conversation_id,
                    created_at=now,
                    updated_at=now,
                    expires_at=now + self.limits.ttl_seconds,
                    # A conversation deleted while this answer was written starts again bare:
                    # nothing of the deleted one comes back, its instructions included.
                    instructions=request.instructions if answered is None else None,
                )
                turn = Turn(
                    number=base.next_turn_number,
                    question=request.question,
                    answer=answer.text,
                    at=now,
                    client_request_id=request.client_request_id,
                    request_digest=digest,
                    input_tokens=answer.usage.input_tokens if answer.usage else None,
                    output_tokens=answer.usage.output_tokens if answer.usage else None,
                    sources=tuple(dict.fromkeys(passage.source for passage in answer.sources)),
                )
                updated = base.with_turn(
                    turn,
                    now=now,
                    ttl_seconds=self.limits.ttl_seconds,
                    max_turns=self.limits.max_turns,
                    max_bytes=self.limits.max_bytes,
                )
                try:
                    if stored is None or etag is None:
                        written = await self.store.create(updated, max_conversations=self.max_conversations)
                    else:
                        written = await self.store.replace(updated, if_match=etag)
                except VersionConflict:
                    continue
                except QuotaFull as full:
                    raise quota_exceeded(full.kept, self.max_conversations) from None
                turns.record(Stored(updated, written))
                return _result(answer, conversation_id, answered, stored, base, updated, turn)
        raise Unavailable(
            f"conversation {conversation_id!r} is receiving too many turns at once; retry in a second.",
            retry_after=1.0,
        )

    async def _read(
        self, principal: Principal, request: AskRequest, conversation_id: str, digest: str | None
    ) -> tuple[Conversation | None, str | None] | AskResult:
        """The stored conversation and its ETag, checked against the request; or the result of
        a retry already answered (its receipt)."""
        found = await self.store.get(principal.oid, conversation_id)
        if found is None:
            return None, None
        return _check(principal, request, conversation_id, digest, found)


def _check(
    principal: Principal, request: AskRequest, conversation_id: str, digest: str | None, found: Stored
) -> tuple[Conversation, str] | AskResult:
    """`found` if the request may add a turn to it; the receipt's result for a retry."""
    stored, etag = found
    if stored.tid != principal.tid:
        raise Conflict(
            f"conversationId {conversation_id!r} is already used by your account in another "
            "tenant: choose another conversationId."
        )
    replay = find_receipt(stored, request, digest)
    if replay is not None:
        return replay
    if request.instructions is not None:
        # 409, not 400: the same request is valid for a conversation that does not exist yet.
        raise Conflict(
            f"instructions bind when a conversation is created, and conversation "
            f"{conversation_id!r} already exists: omit instructions, or use a new conversationId."
        )
    return stored, etag


def jittered_backoff(attempt: int) -> float:
    """Seconds to wait before write attempt `attempt` (2 and up): "full jitter" up to a bound
    that doubles from 5 ms to 200 ms, so writers from several processes stop colliding."""
    return random.uniform(0.0, min(0.2, 0.005 * 2 ** (attempt - 2)))


def _result(
    answer: Answer,
    conversation_id: str,
    answered: Conversation | None,
    stored: Conversation | None,
    base: Conversation,
    updated: Conversation,
    turn: Turn,
) -> AskResult:
    """The envelope of a turn written on top of `stored` (None: it created the conversation),
    answered from `answered` (the conversation as first read; None if there was none)."""
    notes = []
    if answered is not None and (stored is None or stored.created_at != answered.created_at):
        # Deleted (and perhaps started again by another turn) while this answer was written.
        notes.append(
            f"Conversation {conversation_id!r} was deleted while this answer was written, so "
            + (
                "it was started again holding only this turn."
                if stored is None
                else "this turn was added to the conversation started again since."
            )
        )
    elif stored is not None and (answered is None or stored.version != answered.version):
        notes.append(
            "Another turn landed on this conversation while this one was answered; "
            "this turn was added after it."
        )
    dropped_now = updated.dropped - base.dropped
    if dropped_now:
        notes.append(
            f"{dropped_now} older turn{'s were' if dropped_now > 1 else ' was'} dropped to keep "
            f"this conversation within its limits ({updated.dropped} dropped in all)."
        )
    if answer.note:
        notes.append(answer.note)
    if answer.history_left_out:
        left_out = answer.history_left_out
        notes.append(
            f"The {left_out} earliest turn{'s' if left_out > 1 else ''} did not fit in the answer "
            f"engine's context and {'were' if left_out > 1 else 'was'} not seen by this answer."
        )
    return AskResult(
        answer=answer.text,
        conversation_id=conversation_id,
        note=" ".join(notes) or None,
        created=stored is None,
        turn=turn.number,
        outcome="created" if stored is None else "continued",
        condensed=updated.dropped > 0 or answer.history_left_out > 0,
        sources=answer.sources,
        usage=answer.usage,
    )
