"""MCP tools that manage conversations: start, list, read back, delete. All need a signed-in user."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult
from pydantic import Field

from app.api.mcp import principal_from, tool_errors, tool_result
from app.api.schemas import (
    ConversationOutput,
    DeleteOutput,
    ListOutput,
    StartOutput,
)
from app.runtime import RuntimeRef

ConversationIdArg = Annotated[
    str, Field(description="The conversation's id (from ask or start_conversation).")
]


def register_conversation_tools(server: MCPServer, runtime: RuntimeRef) -> list[str]:
    """Add the conversation tools to `server`; returns their names."""

    @server.tool(
        name="start_conversation",
        description=(
            "Start a conversation with a server-minted conversationId (use it on every later ask). "
            "Optional instructions apply to every turn; an optional title shows in list_conversations. "
            "Needs a signed-in user."
        ),
    )
    async def start_conversation(
        ctx: Context,
        instructions: Annotated[str | None, Field(description="Instructions for every turn.")] = None,
        title: Annotated[str | None, Field(description="A short title for listings.")] = None,
    ) -> Annotated[CallToolResult, StartOutput]:
        with tool_errors():
            started = await runtime.get().conversations.start(
                principal_from(ctx), instructions=instructions, title=title
            )
        output = StartOutput.of(started)
        return tool_result(
            f"Started conversation {output.conversationId} (expires {output.expiresAt}).", output
        )

    @server.tool(
        name="list_conversations",
        description=(
            "List your conversations, most recently updated first, with title, turn count and expiry. "
            "Pass nextCursor as cursor to get the next page."
        ),
    )
    async def list_conversations(
        ctx: Context,
        limit: Annotated[int, Field(description="Conversations per page (1-100).")] = 20,
        cursor: Annotated[str | None, Field(description="nextCursor of the previous page.")] = None,
    ) -> Annotated[CallToolResult, ListOutput]:
        with tool_errors():
            page = await runtime.get().conversations.list(principal_from(ctx), limit=limit, cursor=cursor)
        output = ListOutput.of(page)
        lines = [
            f"{c.conversationId}: {c.title or '(untitled)'}, {c.turns} turn{'' if c.turns == 1 else 's'}, "
            f"updated {c.updatedAt}"
            for c in output.conversations
        ]
        return tool_result("\n".join(lines) or "No conversations.", output)

    @server.tool(
        name="get_conversation",
        description="Read back one of your conversations: its instructions and turns, newest last.",
    )
    async def get_conversation(
        ctx: Context,
        conversationId: ConversationIdArg,
        limit: Annotated[int | None, Field(description="Return only the latest N turns (1-1000).")] = None,
    ) -> Annotated[CallToolResult, ConversationOutput]:
        with tool_errors():
            conversation, turns = await runtime.get().conversations.get(
                principal_from(ctx), conversationId, limit=limit
            )
        output = ConversationOutput.of(conversation, turns)
        text = "\n\n".join(f"Turn {t.turn}\nQ: {t.question}\nA: {t.answer}" for t in output.turns)
        return tool_result(text or f"Conversation {conversationId} has no turns yet.", output)

    @server.tool(
        name="delete_conversation",
        description=(
            "Delete one of your conversations and all its turns. Safe to repeat: deleted is false when "
            "there was nothing to delete."
        ),
    )
    async def delete_conversation(
        ctx: Context, conversationId: ConversationIdArg
    ) -> Annotated[CallToolResult, DeleteOutput]:
        with tool_errors():
            deleted = await runtime.get().conversations.delete(principal_from(ctx), conversationId)
        text = (
            f"Deleted conversation {conversationId}." if deleted else f"Nothing to delete: {conversationId}."
        )
        return tool_result(text, DeleteOutput(deleted=deleted))

    return ["start_conversation", "list_conversations", "get_conversation", "delete_conversation"]
