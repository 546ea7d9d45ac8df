"""Wire shapes shared by the MCP tools (structuredContent, outputSchema) and REST (JSON bodies)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.domain.ask import AskResult
from app.domain.conversation import Conversation, ConversationPage, ConversationSummary, Turn
from app.domain.lifecycle import StartedConversation
from app.ports import Passage


class SourceRef(BaseModel):
    """A passage an answer drew on."""

    source: str = Field(description="File of the corpus, relative to its folder.")
    heading: str = Field(description="Heading of the passage within the file.")
    score: float = Field(description="Relevance score (higher is better).")


class AskOutput(BaseModel):
    """The `ask` envelope."""

    model_config = ConfigDict(title="AskResult")

    answer: str = Field(description="The answer text (also the tool's text content).")
    conversationId: str | None = Field(
        description="The conversation this turn belongs to; null when the answer is one-shot."
    )
    note: str | None = Field(
        description="Why the answer is one-shot, or what else happened; null when nothing."
    )
    created: bool = Field(description="True on the turn that created the conversation.")
    turn: int | None = Field(
        description="1-based number of this turn in its conversation; null when one-shot."
    )
    condensed: bool = Field(
        description="True when older turns of the conversation were dropped to fit its limits."
    )
    sources: list[SourceRef] = Field(description="Passages the answer cites.")

    @classmethod
    def of(cls, result: AskResult) -> AskOutput:
        return cls.model_validate(cls.content(result))

    @staticmethod
    def content(result: AskResult) -> dict[str, Any]:
        """`of(result).model_dump(mode="json")`, built without the model: `ask` returns it on every
        call as structuredContent."""
        return {
            "answer": result.answer,
            "conversationId": result.conversation_id,
            "note": result.note,
            "created": result.created,
            "turn": result.turn,
            "condensed": result.condensed,
            "sources": [
                {"source": p.source, "heading": p.heading, "score": round(p.score, 4)} for p in result.sources
            ],
        }


class SearchHit(BaseModel):
    """One ranked passage."""

    source: str = Field(description="File of the corpus, relative to its folder.")
    heading: str = Field(description="Heading of the passage within the file.")
    text: str = Field(description="The passage text.")
    score: float = Field(description="Relevance score (higher is better).")

    @classmethod
    def of(cls, passage: Passage) -> SearchHit:
        return cls(
            source=passage.source, heading=passage.heading, text=passage.text, score=round(passage.score, 4)
        )


class SearchOutput(BaseModel):
    """The `search` result."""

    model_config = ConfigDict(title="SearchResult")

    results: list[SearchHit] = Field(description="Ranked passages, best first.")


class AskBody(BaseModel):
    """`POST /api/ask` body: the same arguments as the `ask` tool."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(description="The question to answer.")
    conversationId: str | None = Field(
        None, description="Continue (or start) this conversation; omit for a one-shot answer."
    )
    instructions: str | None = Field(None, description="Instructions bound when the conversation is created.")
    clientRequestId: str | None = Field(
        None, description="Retry key: a retry with the same key is not appended twice."
    )


def iso_time(seconds: float) -> str:
    """Seconds since the epoch as an RFC 3339 UTC timestamp."""
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class StartOutput(BaseModel):
    """A conversation just started with a server-minted id."""

    model_config = ConfigDict(title="StartedConversation")

    conversationId: str = Field(description="Pass this to ask on every turn of the conversation.")
    title: str | None = Field(description="The title given, if any.")
    expiresAt: str = Field(
        description="When the conversation expires unless a turn extends it (RFC 3339, UTC)."
    )

    @classmethod
    def of(cls, started: StartedConversation) -> StartOutput:
        return cls(
            conversationId=started.conversation_id,
            title=started.title,
            expiresAt=iso_time(started.expires_at),
        )


class ConversationItem(BaseModel):
    """One conversation in a listing."""

    conversationId: str = Field(description="The conversation's id.")
    title: str | None = Field(description="Its title, if one was given.")
    turns: int = Field(description="How many turns it has had.")
    updatedAt: str = Field(description="When the last turn (or the start) happened (RFC 3339, UTC).")
    expiresAt: str = Field(description="When it expires unless a turn extends it (RFC 3339, UTC).")

    @classmethod
    def of(cls, summary: ConversationSummary) -> ConversationItem:
        return cls(
            conversationId=summary.conversation_id,
            title=summary.title,
            turns=summary.turns,
            updatedAt=iso_time(summary.updated_at),
            expiresAt=iso_time(summary.expires_at),
        )


class ListOutput(BaseModel):
    """A page of the caller's conversations, newest first."""

    model_config = ConfigDict(title="ConversationList")

    conversations: list[ConversationItem] = Field(description="Conversations, most recently updated first.")
    nextCursor: str | None = Field(description="Pass as cursor for the next page; null on the last page.")

    @classmethod
    def of(cls, page: ConversationPage) -> ListOutput:
        return cls(conversations=[ConversationItem.of(s) for s in page.items], nextCursor=page.next_cursor)


class TurnItem(BaseModel):
    """One stored turn."""

    turn: int = Field(description="1-based number of the turn in its conversation.")
    question: str = Field(description="The question asked.")
    answer: str = Field(description="The answer given.")
    at: str = Field(description="When the turn happened (RFC 3339, UTC).")


class ConversationOutput(BaseModel):
    """A conversation read back, newest turn last."""

    model_config = ConfigDict(title="Conversation")

    conversationId: str = Field(description="The conversation's id.")
    title: str | None = Field(description="Its title, if one was given.")
    instructions: str | None = Field(description="Instructions bound when it was created, if any.")
    turns: list[TurnItem] = Field(description="The kept turns (at most the limit asked), oldest first.")
    condensed: bool = Field(
        description="True when older turns were dropped to fit the conversation's limits."
    )
    expiresAt: str = Field(description="When it expires unless a turn extends it (RFC 3339, UTC).")

    @classmethod
    def of(cls, conversation: Conversation, turns: tuple[Turn, ...]) -> ConversationOutput:
        return cls(
            conversationId=conversation.conversation_id,
            title=conversation.title,
            instructions=conversation.instructions,
            turns=[
                TurnItem(turn=t.number, question=t.question, answer=t.answer, at=iso_time(t.at))
                for t in turns
            ],
            condensed=conversation.dropped > 0,
            expiresAt=iso_time(conversation.expires_at),
        )


class DeleteOutput(BaseModel):
    """Whether a conversation was deleted."""

    model_config = ConfigDict(title="DeleteResult")

    deleted: bool = Field(
        description="True if it existed and was deleted; false when there was nothing to delete."
    )


class DeleteAllOutput(BaseModel):
    """How many of the caller's conversations were deleted."""

    deleted: int = Field(description="Number of conversations deleted.")


class StartBody(BaseModel):
    """`POST /api/conversations` body."""

    model_config = ConfigDict(extra="forbid")

    instructions: str | None = Field(None, description="Instructions the answer engine gets on every turn.")
    title: str | None = Field(None, description="A title shown in listings.")
