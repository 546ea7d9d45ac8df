"""The MCP surface: tools `ask` and `search` on the official SDK's `MCPServer`, stateless.

Tools are thin: they read the caller from the request, call the shared `AskService`, and map
its errors to tool errors whose text tells an agent what to do next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, Icon, InputRequiredResult, TextContent, ToolAnnotations
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, ValidationError

import app
from app.api.schemas import AskOutput, SearchHit, SearchOutput
from app.api.signin import principal_of
from app.domain.ask import AskRequest
from app.domain.principal import Principal
from app.errors import AnvilError
from app.observability import mcp_spans_wanted
from app.runtime import RuntimeRef
from app.settings import Settings

INSTRUCTIONS = (
    "Anvil answers questions from its knowledge base with the `ask` tool and ranks passages with "
    "`search`. To hold a conversation, pass the same conversationId on every `ask` (pick one, or get "
    "one from `start_conversation`); `list_conversations`, `get_conversation` and "
    "`delete_conversation` manage your conversations."
)


def _days(seconds: int) -> str:
    days = seconds / 86400
    return f"{days:g} days" if days >= 1 else f"{seconds} seconds"


def ask_description(settings: Settings) -> str:
    return (
        "Answer a question from Anvil's knowledge base, citing the documents used. "
        "To hold a conversation, pass the same conversationId on every turn (any new id of 1-64 "
        "letters, digits, '.', '_' or '-' starts one, e.g. a UUID); earlier turns are then used to "
        "answer follow-ups. Without a conversationId, or when not signed in, the answer is one-shot "
        f"and nothing is stored. A conversation lives {_days(settings.history_ttl_seconds)} after its "
        f"last turn and keeps its latest {settings.history_max_turns} turns; older ones are dropped "
        "(condensed: true). instructions apply only when a conversation is created. clientRequestId "
        "makes a retry safe: the same key with the same arguments returns the stored answer."
    )


class TextArguments(FuncMetadata):
    """Argument handling that takes a string argument as the string it is.

    The SDK parses a string argument as JSON when its annotation is not exactly `str` (as with
    `str | None`), for clients that send lists as JSON text. Anvil's arguments are text or
    numbers, so that only ever turned text such as instructions '["be brief"]' into a list, and
    the call was refused.
    """

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        return data

    @classmethod
    def of(cls, metadata: FuncMetadata) -> TextArguments:
        return cls.model_construct(**{name: getattr(metadata, name) for name in FuncMetadata.model_fields})


class AnvilMCPServer(MCPServer[Any]):
    """`MCPServer` that takes text arguments as sent (`TextArguments`) and whose argument errors
    name each bad field in words an agent can act on.

    The SDK reports them as raw pydantic text with documentation links and echoes the values.
    """

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        super().add_tool(fn, name, title, description, annotations, icons, meta, structured_output)
        tool = self._tool_manager.get_tool(name or fn.__name__)  # the SDK offers no public handle
        if tool is not None:
            tool.fn_metadata = TextArguments.of(tool.fn_metadata)

    def drop_request_spans(self) -> None:
        """Leave out the SDK's OpenTelemetry span middleware, as the SDK documents for opting out."""
        middleware = self._lowlevel_server.middleware  # the SDK's list; it offers no setter
        middleware[:] = [m for m in middleware if not isinstance(m, OpenTelemetryMiddleware)]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if not isinstance(cause, ValidationError):
                raise
            problems = "; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or 'arguments'}: {item['msg']}"
                for item in cause.errors()
            )
            raise ToolError(f"Invalid arguments for {name}: {problems}. Fix them and call again.") from None


@contextmanager
def tool_errors() -> Iterator[None]:
    """Report an `AnvilError` as a tool error whose text tells the agent what to do next."""
    try:
        yield
    except AnvilError as error:
        raise ToolError(error.message) from None


def tool_result(text: str, output: BaseModel | dict[str, Any]) -> CallToolResult:
    """A tool result: `text` for text consumers, `output` (a model, or one dumped) as structuredContent."""
    content = output.model_dump(mode="json") if isinstance(output, BaseModel) else output
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=content)


def principal_from(ctx: Context) -> Principal | None:
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    return principal_of(scope) if isinstance(scope, dict) else None


def build_mcp_server(runtime: RuntimeRef, settings: Settings) -> AnvilMCPServer:
    """The MCP server with Anvil's tools; its HTTP app is mounted by `create_app`."""
    server = AnvilMCPServer(
        "anvil",
        version=app.__version__,
        instructions=INSTRUCTIONS,
        subscriptions=False,
        log_level=settings.log_level.upper(),  # type: ignore[arg-type]
    )
    if not mcp_spans_wanted(settings.mcp_spans):
        server.drop_request_spans()

    @server.tool(name="ask", description=ask_description(settings))
    async def ask(
        question: Annotated[str, Field(description="The question to answer.")],
        ctx: Context,
        conversationId: Annotated[
            str | None,
            Field(description="Continue (or start) this conversation. Omit for a one-shot answer."),
        ] = None,
        instructions: Annotated[
            str | None,
            Field(description="Instructions for the whole conversation; only when it is created."),
        ] = None,
        clientRequestId: Annotated[
            str | None,
            Field(description="Retry key (same pattern as conversationId): a retry is never appended twice."),
        ] = None,
    ) -> Annotated[CallToolResult, AskOutput]:
        request = AskRequest(question, conversationId, instructions, clientRequestId)
        with tool_errors():
            result = await runtime.get().service.ask(principal_from(ctx), request)
        return tool_result(result.answer, AskOutput.content(result))

    @server.tool(
        name="search",
        description=(
            "Rank passages of Anvil's knowledge base for some words, best first, with file, heading "
            "and score. Use it to read sources; use `ask` for an answer."
        ),
    )
    async def search(
        searchText: Annotated[str, Field(description="Words to look for.")],
        maxResults: Annotated[int, Field(description="How many passages to return (1-50).")] = 5,
    ) -> Annotated[CallToolResult, SearchOutput]:
        with tool_errors():
            passages = await runtime.get().service.search(searchText, maxResults)
        output = SearchOutput(results=[SearchHit.of(p) for p in passages])
        text = "\n\n".join(f"{h.source} ({h.heading}), score {h.score}:\n{h.text}" for h in output.results)
        return tool_result(text or "No passage matches.", output)

    from app.surface.mcp_conversations import register_conversation_tools

    tool_names = frozenset({"ask", "search", *register_conversation_tools(server, runtime)})
    available = ", ".join(sorted(tool_names))

    async def protocol_fixes(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Where the SDK's answer differs from the specification, answer as the specification says."""
        params = ctx.params or {}
        if ctx.method == "tools/call":
            # The SDK answers an unknown tool with an isError result; the spec says -32602.
            name = params.get("name")
            if isinstance(name, str) and name not in tool_names:
                raise MCPError(
                    code=INVALID_PARAMS, message=f"Unknown tool: {name!r}. Available: {available}."
                )
        elif ctx.method == "prompts/get":
            # Anvil has no prompts; the SDK would answer an internal error.
            raise MCPError(
                code=INVALID_PARAMS, message=f"Unknown prompt: {params.get('name')!r}. Anvil has none."
            )
        result = await call_next(ctx)
        if ctx.method == "server/discover" and isinstance(result, dict):
            # Every revision is served on every POST, as the -32022 error's `supported` list says.
            result = {**result, "supportedVersions": list(KNOWN_PROTOCOL_VERSIONS)}
        return result

    server.middleware.append(protocol_fixes)
    return server
