"""Wire shapes shared by the MCP tools (structuredContent, outputSchema) and REST (JSON bodies)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.answers.engine import Passage
from app.conversations.service import AskResult


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
        return cls(
            answer=result.answer,
            conversationId=result.conversation_id,
            note=result.note,
            created=result.created,
            turn=result.turn,
            condensed=result.condensed,
            sources=[
                SourceRef(source=p.source, heading=p.heading, score=round(p.score, 4)) for p in result.sources
            ],
        )


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
