"""Every operation Anvil offers, each declared once.

An `Operation` holds its arguments model, result model, the service call, how its text content
reads, its tool annotations and its REST route. `app.mcp_server.server` turns each into an MCP tool and
`app.rest.routes` into a REST route, so a rule, a description or a bound can only say one thing.
"""

from __future__ import annotations

from typing import Any

from app.domain.ask_types import AskRequest
from app.errors import AnvilError, NotFound
from app.operations.operation import Call, Described, Operation, Route
from app.operations.results import (
    AskOutput,
    ConversationOutput,
    DeleteAllOutput,
    DeleteOutput,
    FetchOutput,
    ListOutput,
    SearchHit,
    SearchOutput,
    StartOutput,
)
from app.operations.schemas import (
    AskInput,
    DeleteInput,
    FetchInput,
    GetInput,
    ListInput,
    NoInput,
    SearchInput,
    StartInput,
)

# --- handlers and their text ---------------------------------------------------------------------


async def ask(call: Call, args: AskInput) -> AskOutput:
    request = AskRequest(args.question, args.conversation_id, args.instructions, args.client_request_id)
    instruments = call.runtime.telemetry.instruments
    try:
        result = await call.runtime.service.ask(call.principal, request, progress=call.progress)
    except AnvilError as error:
        instruments.asks.add(1, {"anvil.ask.outcome": "refused", "error.type": error.kind})
        raise
    instruments.asks.add(1, {"anvil.ask.outcome": result.outcome})
    if result.condensed:
        instruments.condensed.add(1)
    return AskOutput.of(result)


async def search(call: Call, args: SearchInput) -> SearchOutput:
    knowledge = call.runtime.knowledge
    passages = [] if knowledge is None else await knowledge.search(args.search_text, args.max_results)
    versions = {p.index_version for p in passages}
    return SearchOutput(
        results=[SearchHit.of(p) for p in passages],
        indexVersion=versions.pop() if len(versions) == 1 else None,
    )


def search_text(_: SearchInput, output: SearchOutput) -> str:
    hits = (f"{h.source} ({h.heading}), score {h.score}:\n{h.text}" for h in output.results)
    return "\n\n".join(hits) or "No passage matches."


async def fetch(call: Call, args: FetchInput) -> FetchOutput:
    knowledge = call.runtime.knowledge
    document = None if knowledge is None else await knowledge.fetch(args.source, args.max_chars)
    if document is None:
        raise NotFound(
            f"No source named {args.source!r} in the knowledge base: pass a source exactly as ask's "
            "sources or search's results name it."
        )
    return FetchOutput.of(document)


def fetch_text(_: FetchInput, output: FetchOutput) -> str:
    cut = f"\n\n[Truncated: {len(output.text)} of {output.totalChars} characters shown.]"
    return f"{output.source}: {output.title}\n\n{output.text}" + (cut if output.truncated else "")


async def start_conversation(call: Call, args: StartInput) -> StartOutput:
    started = await call.runtime.conversations.start(
        call.principal, instructions=args.instructions, title=args.title
    )
    return StartOutput.of(started)


async def list_conversations(call: Call, args: ListInput) -> ListOutput:
    page = await call.runtime.conversations.list(call.principal, limit=args.limit, cursor=args.cursor)
    return ListOutput.of(page)


def list_text(_: ListInput, output: ListOutput) -> str:
    lines = (
        f"{c.conversationId}: {c.title or '(untitled)'}, {c.turns} turn{'' if c.turns == 1 else 's'}, "
        f"updated {c.updatedAt}"
        for c in output.conversations
    )
    return "\n".join(lines) or "No conversations."


async def get_conversation(call: Call, args: GetInput) -> ConversationOutput:
    conversation, turns = await call.runtime.conversations.get(
        call.principal, args.conversation_id, limit=args.limit
    )
    return ConversationOutput.of(conversation, turns)


def conversation_text(_: GetInput, output: ConversationOutput) -> str:
    turns = (f"Turn {t.turn}\nQ: {t.question}\nA: {t.answer}" for t in output.turns)
    return "\n\n".join(turns) or f"Conversation {output.conversationId} has no turns yet."


async def delete_conversation(call: Call, args: DeleteInput) -> DeleteOutput:
    deleted = await call.runtime.conversations.delete(call.principal, args.conversation_id)
    return DeleteOutput(deleted=deleted)


def delete_text(args: DeleteInput, output: DeleteOutput) -> str:
    if output.deleted:
        return f"Deleted conversation {args.conversation_id}."
    return f"Nothing to delete: {args.conversation_id}."


async def delete_all_conversations(call: Call, _: NoInput) -> DeleteAllOutput:
    return DeleteAllOutput(deleted=await call.runtime.conversations.delete_all(call.principal))


def _days(seconds: int) -> str:
    days = seconds / 86400
    return f"{days:g} days" if days >= 1 else f"{seconds} seconds"


def ask_description(described: Described) -> str:
    """`ask`'s description, naming the knowledge and the history bounds in force."""
    settings = described.history
    ttl_seconds, max_turns = settings.history_ttl_seconds, settings.history_max_turns
    return (
        f"Answer a question from {described.knowledge_phrase}: the answer quotes the passages that "
        "answer, each under its page and section, and cites them (sources). Use it whenever the "
        f"user asks something {described.knowledge_name} may cover. To hold a "
        "conversation, pass the same conversationId on every turn (any new id of 1-64 letters, "
        "digits, '.', '_' or '-' starts one, e.g. a UUID); earlier turns are then used to answer "
        "follow-ups. Without a conversationId, or when not signed in, the answer is one-shot and "
        f"nothing is stored. A conversation lives {_days(ttl_seconds)} after its last turn and keeps "
        f"its latest {max_turns} turns; older ones are dropped (condensed: true). instructions apply "
        "only when a conversation is created. clientRequestId makes a retry safe: the same key with "
        "the same arguments returns the stored answer."
    )


ASK: Operation[AskInput, AskOutput] = Operation(
    name="ask",
    title="Ask a question",
    description=ask_description,
    arguments=AskInput,
    result=AskOutput,
    handler=ask,
    text=lambda _, output: output.answer,
    route=Route("POST", "/api/ask", "ask", "Ask a question", "ask", errors=(400, 409, 502, 503)),
)

OPERATIONS: tuple[Operation[Any, Any], ...] = (
    ASK,
    Operation(
        name="search",
        title="Search the knowledge base",
        description=lambda described: (
            f"Rank passages of {described.knowledge_name} for some words, best first, with file, "
            "heading and score. Use it to read sources or check what it says word for word; use ask "
            "for an answer. Stores nothing."
        ),
        arguments=SearchInput,
        result=SearchOutput,
        handler=search,
        text=search_text,
        route=Route("GET", "/api/search", "search", "Rank passages of the knowledge base", "ask"),
        read_only=True,
        idempotent=True,
    ),
    Operation(
        name="fetch",
        title="Read a source",
        description=lambda described: (
            f"Read the whole text of one document of {described.knowledge_name}, from the start, up "
            "to maxChars characters. Pass `source` exactly as ask's sources or search's results name "
            "it. Use it to read beyond the passage an answer or a search quoted. Stores nothing."
        ),
        arguments=FetchInput,
        result=FetchOutput,
        handler=fetch,
        text=fetch_text,
        route=Route(
            "GET",
            "/api/fetch",
            "fetch",
            "Read a document of the knowledge base",
            "ask",
            errors=(400, 404, 503),
        ),
        read_only=True,
        idempotent=True,
    ),
    Operation(
        name="start_conversation",
        title="Start a conversation",
        description=(
            "Start a conversation with a server-minted conversationId, to pass on every later ask. "
            "Use it when the conversation needs instructions (they bind at creation) or a title; "
            "otherwise any new conversationId on ask starts one too. Needs a signed-in user."
        ),
        arguments=StartInput,
        result=StartOutput,
        handler=start_conversation,
        text=lambda _, o: f"Started conversation {o.conversationId} (expires {o.expiresAt}).",
        route=Route(
            "POST",
            "/api/conversations",
            "startConversation",
            "Start a conversation with a server-minted id",
            "conversations",
            status_code=201,
            errors=(400, 403, 409, 503),
        ),
    ),
    Operation(
        name="list_conversations",
        title="List your conversations",
        description=(
            "List your conversations, most recently updated first, with title, turn count and "
            "expiry. Pass nextCursor as cursor to get the next page. Needs a signed-in user."
        ),
        arguments=ListInput,
        result=ListOutput,
        handler=list_conversations,
        text=list_text,
        route=Route(
            "GET",
            "/api/conversations",
            "listConversations",
            "List your conversations, newest first",
            "conversations",
            errors=(400, 403, 503),
        ),
        read_only=True,
        idempotent=True,
    ),
    Operation(
        name="delete_all_conversations",
        title="Delete all your conversations",
        description=(
            "Delete every conversation of the caller in the tenant they are signed in to, with all "
            "their turns."
        ),
        arguments=NoInput,
        result=DeleteAllOutput,
        handler=delete_all_conversations,
        text=lambda _, o: f"Deleted {o.deleted} conversation{'' if o.deleted == 1 else 's'}.",
        route=Route(
            "DELETE",
            "/api/conversations",
            "deleteAllConversations",
            "Delete all of your conversations",
            "conversations",
            errors=(400, 403, 503),
        ),
        destructive=True,
        idempotent=True,
        tool=False,
    ),
    Operation(
        name="get_conversation",
        title="Read a conversation",
        description=(
            "Read back one of your conversations: its instructions and turns, newest last. Use it "
            "to recall what was said; ask already uses earlier turns by itself."
        ),
        arguments=GetInput,
        result=ConversationOutput,
        handler=get_conversation,
        text=conversation_text,
        route=Route(
            "GET",
            "/api/conversations/{conversationId}",
            "getConversation",
            "Read back one conversation, newest turn last",
            "conversations",
            errors=(400, 403, 404, 503),
        ),
        read_only=True,
        idempotent=True,
    ),
    Operation(
        name="delete_conversation",
        title="Delete a conversation",
        description=(
            "Delete one of your conversations and all its turns; this cannot be undone. Safe to "
            "repeat: deleted is false when there was nothing to delete."
        ),
        arguments=DeleteInput,
        result=DeleteOutput,
        handler=delete_conversation,
        text=delete_text,
        route=Route(
            "DELETE",
            "/api/conversations/{conversationId}",
            "deleteConversation",
            "Delete one conversation (idempotent)",
            "conversations",
            errors=(400, 403, 503),
        ),
        destructive=True,
        idempotent=True,
    ),
)
