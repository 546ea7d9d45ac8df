"""Spans and metrics around the ports: `TracedStore` and `TracedEngine` wrap a
`ConversationStore` and an `AnswerEngine` so the domain records without knowing of telemetry.

Conversation and user ids appear only as pseudonyms, and only on a span that records: computing
them is most of what a wrapped call costs when nothing is exported.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode

from app.domain.conversation import Conversation, ConversationPage
from app.domain.ports import (
    Answer,
    AnswerEngine,
    ConversationStore,
    PastExchange,
    Progress,
    Stored,
    VersionConflict,
)
from app.errors import AnvilError, StoreFailed
from app.telemetry.instruments import Telemetry
from app.telemetry.spans import CurrentSpan

#: Request charges of the store operation under way in this task (Cosmos DB only).
_CHARGES: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("anvil_charges", default=None)


class TracedStore:
    """A `ConversationStore` whose every operation is a client span and a duration, with turns
    written and conflicts counted. Conversation and user ids appear only as pseudonyms."""

    def __init__(self, inner: ConversationStore, telemetry: Telemetry, kind: str) -> None:
        self.inner = inner
        self.telemetry = telemetry
        self.kind = kind
        self._system = {"sqlite": "sqlite", "cosmos": "azure.cosmosdb"}.get(kind, "other_sql")
        observe = getattr(inner, "observe_request_charges", None)
        #: Only a store that reports request charges (Cosmos DB) needs them collected per call.
        self._charges = observe is not None
        if observe is not None:
            observe(self._charged)

    def _charged(self, request_units: float) -> None:
        """A Cosmos DB response's request charge, added to the operation under way."""
        charges = _CHARGES.get()
        if charges is not None:
            charges.append(request_units)

    async def _traced(
        self, operation: str, call: Callable[[], Any], oid: str, conversation_id: str | None = None
    ) -> Any:
        telemetry = self.telemetry
        labels = {"db.system.name": self._system, "db.operation.name": operation}
        started = time.perf_counter()
        charges: list[float] = []
        collecting = _CHARGES.set(charges) if self._charges else None
        with CurrentSpan(
            telemetry.tracer, f"{operation} conversations", kind=SpanKind.CLIENT, attributes=labels
        ) as span:
            if span.is_recording():
                span.set_attributes(self._ids(oid, conversation_id))
            try:
                result = await call()
            except VersionConflict:
                telemetry.instruments.conflicts.add(1, {"db.operation.name": operation})
                span.set_attribute("anvil.conflict", True)
                raise
            except AnvilError as error:
                span.set_status(Status(StatusCode.ERROR, error.kind))
                span.set_attribute("error.type", error.kind)
                labels = {**labels, "error.type": error.kind}
                if isinstance(error, StoreFailed):
                    telemetry.instruments.store_failures.add(
                        1, {"db.system.name": self._system, "error.type": error.cause}
                    )
                raise
            finally:
                if collecting is not None:
                    _CHARGES.reset(collecting)
                telemetry.instruments.store_duration.record(time.perf_counter() - started, labels)
                if charges:
                    span.set_attribute("azure.cosmosdb.operation.request_charge", sum(charges))
                    telemetry.instruments.store_charge.record(sum(charges), labels)
        return result

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        found: Stored | None = await self._traced(
            "get", lambda: self.inner.get(oid, conversation_id), oid, conversation_id
        )
        return found

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        etag: str = await self._traced(
            "create",
            lambda: self.inner.create(conversation, max_conversations=max_conversations),
            conversation.oid,
            conversation.conversation_id,
        )
        self._written()
        return etag

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        etag: str = await self._traced(
            "replace",
            lambda: self.inner.replace(conversation, if_match=if_match),
            conversation.oid,
            conversation.conversation_id,
        )
        self._written()
        return etag

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        deleted: bool = await self._traced(
            "delete",
            lambda: self.inner.delete(oid, conversation_id, if_match=if_match),
            oid,
            conversation_id,
        )
        return deleted

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        page: ConversationPage = await self._traced(
            "list", lambda: self.inner.list(oid, tid, limit=limit, cursor=cursor), oid
        )
        return page

    async def count(self, oid: str, tid: str) -> int:
        counted: int = await self._traced("count", lambda: self.inner.count(oid, tid), oid)
        return counted

    async def delete_all(self, oid: str, tid: str) -> int:
        deleted: int = await self._traced("delete_all", lambda: self.inner.delete_all(oid, tid), oid)
        return deleted

    async def check(self, *, write: bool = False) -> None:
        await self.inner.check(write=write)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _ids(self, oid: str, conversation_id: str | None = None) -> dict[str, str]:
        ids = {"anvil.user": self.telemetry.pseudonym(oid)}
        if conversation_id is not None:
            ids["anvil.conversation"] = self.telemetry.pseudonym(f"{oid}:{conversation_id}")
        return ids

    def _written(self) -> None:
        self.telemetry.instruments.turns.add(1, {"db.system.name": self._system})


class TracedEngine:
    """An `AnswerEngine` whose answers are spans (GenAI conventions for model engines) with their
    duration and token usage recorded."""

    def __init__(self, inner: AnswerEngine, telemetry: Telemetry, model: str | None = None) -> None:
        self.inner = inner
        self.telemetry = telemetry
        self.name = inner.name
        self.model = model

    async def answer(
        self,
        question: str,
        history: Sequence[PastExchange],
        instructions: str | None = None,
        *,
        progress: Progress | None = None,
    ) -> Answer:
        telemetry = self.telemetry
        provider = {"openai": "openai", "azure-openai": "azure.ai.openai"}.get(
            self.name, f"anvil.{self.name}"
        )
        labels: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider}
        if self.model:
            labels["gen_ai.request.model"] = self.model
        attributes: dict[str, Any] = {**labels, "anvil.history.turns": len(history)}
        if telemetry.capture_content:
            attributes["gen_ai.input.messages"] = question
        started = time.perf_counter()
        name = f"chat {self.model}" if self.model else f"answer {self.name}"
        with CurrentSpan(telemetry.tracer, name, kind=SpanKind.CLIENT, attributes=attributes) as span:
            try:
                answer = await self.inner.answer(question, history, instructions, progress=progress)
            except AnvilError as error:
                span.set_status(Status(StatusCode.ERROR, error.kind))
                span.set_attribute("error.type", error.kind)
                labels["error.type"] = error.kind
                raise
            finally:
                telemetry.instruments.engine_duration.record(time.perf_counter() - started, labels)
            span.set_attribute("anvil.sources", len(answer.sources))
            if answer.usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", answer.usage.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", answer.usage.output_tokens)
                tokens = telemetry.instruments.engine_tokens
                tokens.record(answer.usage.input_tokens, {**labels, "gen_ai.token.type": "input"})
                tokens.record(answer.usage.output_tokens, {**labels, "gen_ai.token.type": "output"})
            if telemetry.capture_content:
                span.set_attribute("gen_ai.output.messages", answer.text)
        return answer
