"""The results of every operation: MCP `structuredContent` and `outputSchema`, REST response
bodies. Fields are camelCase, as on the wire; each model's `of` builds it from what the domain
returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from app.domain.ask_types import AskResult
from app.domain.conversation import Conversation, ConversationPage, ConversationSummary, Turn
from app.domain.lifecycle import StartedConversation
from app.domain.ports import Document, Passage, Usage


class SectionRef(BaseModel):
    """A section of a page an answer drew on."""

    model_config = ConfigDict(title="Section")

    heading: str = Field(description="Heading of the section within the file.")
    url: str | None = Field(None, description="The published page and heading; null when not known.")


class SourceRef(BaseModel):
    """A page an answer drew on, with the sections of it the answer drew on, best first."""

    source: str = Field(description="File of the corpus, relative to its folder.")
    title: str | None = Field(None, description="The page's title; null when it has none of its own.")
    heading: str = Field(description="Heading of the best section drawn on, within the file.")
    score: float = Field(description="Relevance score of the best section (higher is better).")
    url: str | None = Field(
        None, description="The published page and heading of the best section; null when not known."
    )
    sections: list[SectionRef] = Field(
        description="Every section of the page the answer drew on, best first."
    )

    @classmethod
    def of_pages(cls, passages: Sequence[Passage]) -> list[SourceRef]:
        """One entry per page, in the order their best passage comes, each with its sections."""
        pages: dict[str, SourceRef] = {}
        for passage in passages:
            section = SectionRef(heading=passage.heading, url=passage.url)
            page = pages.get(passage.source)
            if page is None:
                pages[passage.source] = cls(
                    source=passage.source,
                    title=passage.title,
                    heading=passage.heading,
                    score=round(passage.score, 4),
                    url=passage.url,
                    sections=[section],
                )
            elif section not in page.sections:
                page.sections.append(section)
        return list(pages.values())


class UsageOut(BaseModel):
    """Tokens a language model spent on an answer."""

    model_config = ConfigDict(title="Usage")

    inputTokens: int = Field(description="Tokens of the prompt (instructions, passages, history, question).")
    outputTokens: int = Field(description="Tokens of the answer.")

    @classmethod
    def of(cls, usage: Usage | None) -> UsageOut | None:
        return (
            None if usage is None else cls(inputTokens=usage.input_tokens, outputTokens=usage.output_tokens)
        )


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
    sources: list[SourceRef] = Field(
        description="The pages the answer cites, one entry a page (its sections inside), best first."
    )
    usage: UsageOut | None = Field(
        None, description="Tokens the language model spent; null when no model wrote the answer."
    )

    @classmethod
    def of(cls, result: AskResult) -> AskOutput:
        return cls(
            answer=result.answer,
            conversationId=result.conversation_id,
            note=result.note,
            created=result.created,
            turn=result.turn,
            condensed=result.condensed,
            sources=SourceRef.of_pages(result.sources),
            usage=UsageOut.of(result.usage),
        )


class SearchHit(BaseModel):
    """One ranked passage."""

    source: str = Field(description="File of the corpus, relative to its folder.")
    heading: str = Field(description="Heading of the passage within the file.")
    text: str = Field(description="The passage text.")
    score: float = Field(description="Relevance score (higher is better).")
    url: str | None = Field(
        None, description="The published page and heading the passage is from; null when not known."
    )

    @classmethod
    def of(cls, passage: Passage) -> SearchHit:
        return cls(
            source=passage.source,
            heading=passage.heading,
            text=passage.text,
            score=round(passage.score, 4),
            url=passage.url,
        )


class SearchOutput(BaseModel):
    """The `search` result."""

    model_config = ConfigDict(title="SearchResult")

    results: list[SearchHit] = Field(description="Ranked passages, best first.")
    indexVersion: str | None = Field(
        None,
        description="Version of the knowledge index the passages were found in (null when none were "
        "found, or when the index could not be kept in the data folder and was built in memory).",
    )


class FetchOutput(BaseModel):
    """The `fetch` result."""

    model_config = ConfigDict(title="FetchResult")

    source: str = Field(description="The file read.")
    title: str = Field(description="The document's title.")
    text: str = Field(description="Its text, from the start, at most maxChars characters.")
    totalChars: int = Field(description="Length of the whole text.")
    truncated: bool = Field(description="True when text stops before the end; the rest is not returned.")

    @classmethod
    def of(cls, document: Document) -> FetchOutput:
        return cls(
            source=document.source,
            title=document.title,
            text=document.text,
            totalChars=document.total_chars,
            truncated=document.truncated,
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
    usage: UsageOut | None = Field(
        None, description="Tokens the language model spent on this turn; null when no model answered it."
    )

    @classmethod
    def of(cls, turn: Turn) -> TurnItem:
        usage = (
            UsageOut(inputTokens=turn.input_tokens, outputTokens=turn.output_tokens)
            if turn.input_tokens is not None and turn.output_tokens is not None
            else None
        )
        return cls(
            turn=turn.number, question=turn.question, answer=turn.answer, at=iso_time(turn.at), usage=usage
        )


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
            turns=[TurnItem.of(t) for t in turns],
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
