"""The MCP surface: one tool per operation, on the SDK's low-level `Server`, served stateless.

Tools are generated from `app.operations.catalog`: `inputSchema` and `outputSchema` are the
operation's models, annotations and description come from the definition, and a call validates
its arguments with the same model the REST route uses. An `AnvilError` becomes a tool result
with `isError: true` whose text says what to do next (`tool_error`).

The SDK is used through its public API only: `Server(on_list_tools=, on_call_tool=)`, the
stateless `StreamableHTTPSessionManager`, and `add_request_handler` for the one handler
`app.mcp_server.spec_fixes` replaces.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import x_mcp_header_map
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

import app
from app.errors import AnvilError
from app.http.received import body_of, head_of
from app.http.signin import principal_of
from app.mcp_server import spec_fixes
from app.mcp_server.progress import wants_progress
from app.operations.catalog import OPERATIONS
from app.operations.operation import Call, Described, Operation
from app.operations.schemas import arguments_schema
from app.runtime import Runtime, runtime_of
from app.settings.history import HistorySettings
from app.settings.serve import HttpLimits
from app.settings.telemetry import McpSpans
from app.telemetry.setup import mcp_spans_wanted

logger = logging.getLogger(__name__)

#: What the settings call the knowledge, and what they say it covers (None: nothing said).
Named = tuple[str | None, str | None]


def instructions_for(described: Described) -> str:
    """The server's instructions: what it answers from, and how to hold a conversation."""
    return (
        f"Anvil answers questions from {described.knowledge_phrase} with the `ask` tool, quoting "
        "the passages that answer, and ranks passages with `search`. To hold a conversation, pass "
        "the same conversationId on every `ask` (pick one, or get one from `start_conversation`); "
        "`list_conversations`, `get_conversation` and `delete_conversation` manage your "
        "conversations."
    )


def name_the_knowledge(server: Server[Any], runtime: Runtime, history: HistorySettings, named: Named) -> None:
    """Have the server's instructions name the knowledge the runtime serves (known once its index
    is open, after the server was built)."""
    server.instructions = instructions_for(described_by(runtime, history, named))


def described_by(runtime: Runtime, history: HistorySettings, named: Named) -> Described:
    """What the tools name: the knowledge the runtime serves, else what the settings named."""
    name, covers = named
    if runtime.knowledge is not None:
        status = runtime.knowledge.status()
        name, covers = status.name or name, status.description or covers
    return Described(history, name, covers)


def tool_of(operation: Operation[Any, Any], described: Described) -> Tool:
    """The MCP tool an operation is offered as."""
    settings = described.history
    return Tool(
        name=operation.name,
        title=operation.title,
        description=operation.describe(described),
        input_schema=arguments_schema(operation.arguments, settings),
        output_schema=operation.result.model_json_schema(by_alias=True),
        annotations=ToolAnnotations(
            title=operation.title,
            read_only_hint=operation.read_only,
            destructive_hint=operation.destructive,
            idempotent_hint=operation.idempotent,
            # Anvil answers from its own knowledge base and history, not the open web.
            open_world_hint=False,
        ),
    )


def tool_error(error: AnvilError) -> CallToolResult:
    """A tool result with `isError: true` whose text is the error's agent-facing message."""
    return CallToolResult(content=[TextContent(type="text", text=error.message)], is_error=True)


def build_mcp_server(
    settings: HistorySettings, *, spans: McpSpans, named: Named = (None, None)
) -> Server[Any]:
    """The MCP server with one tool per operation that MCP offers, described with the history
    bounds in force and the knowledge served (`named` by the settings until an index says); the
    SDK's span per request kept as `spans` (`ANVIL_MCP_SPANS`) says."""
    tools = {operation.name: operation for operation in OPERATIONS if operation.tool}
    listings: dict[Named, ListToolsResult] = {}

    def listing_of(described: Described) -> ListToolsResult:
        # One listing per name of the knowledge (it changes only when an index that names
        # itself otherwise is swapped in): built once, not per `tools/list`.
        key = (described.knowledge, described.covers)
        found = listings.get(key)
        if found is None:
            found = listings[key] = ListToolsResult(
                tools=[tool_of(operation, described) for operation in tools.values()]
            )
        return found

    listing = listing_of(Described(settings, *named))
    # The SDK walks the schema it is given on every 2026-07-28 `tools/call` to compare the
    # `Mcp-Param-*` headers with the arguments; a schema that declares no `x-mcp-header` has
    # nothing to compare, and `None` is the SDK's documented "nothing to validate" (the walk of
    # `ask`'s schema took 4 % of a call's CPU).
    header_schemas = {
        tool.name: tool.input_schema for tool in listing.tools if x_mcp_header_map(tool.input_schema)
    }
    available = ", ".join(tools)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        scope = ctx.request.scope if ctx.request is not None else {}
        return listing_of(described_by(runtime_of(scope), settings, named))

    async def call_tool(ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        operation = tools.get(params.name)
        if operation is None:
            # The specification's answer to an unknown tool is a JSON-RPC error, not a tool result.
            raise MCPError(
                code=INVALID_PARAMS, message=f"Unknown tool: {params.name!r}. Available: {available}."
            )
        # The HTTP request this call came in: the caller, and the runtime in its lifespan state.
        scope = ctx.request.scope if ctx.request is not None else {}
        # A client that sent a progressToken hears how a long call is going.
        wants_progress = params.meta is not None and params.meta.get("progress_token") is not None
        call = Call(
            runtime_of(scope), principal_of(scope), ctx.session.report_progress if wants_progress else None
        )
        try:
            arguments = operation.parse(params.arguments, settings)
            output = await operation.handler(call, arguments)
        except AnvilError as error:
            # A caller's mistake or a passing outage: an info line (its kind, not its text, which
            # may name a conversation), never an error.
            logger.info("tool %r refused: %s", params.name, error.kind)
            logger.debug("tool %r refused (%s): %s", params.name, error.kind, error.message)
            return tool_error(error)
        return CallToolResult(
            content=[TextContent(type="text", text=operation.text(arguments, output))],
            structured_content=output.model_dump(mode="json", by_alias=True),
        )

    # No prompts and no resources: nothing is registered for them, so they are not advertised,
    # and a host that asks anyway is told the method is not served (-32601).
    server: Server[Any] = Server(
        "anvil",
        version=app.__version__,
        instructions=instructions_for(Described(settings, *named)),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        # Lets the SDK check `Mcp-Param-*` headers without running `tools/list` per call.
        get_tool_input_schema=header_schemas.get,
    )
    if not mcp_spans_wanted(spans):
        # The SDK's only default middleware is its OpenTelemetry span per request, and it
        # documents dropping it from this list as the way to opt out.
        server.middleware.clear()
    spec_fixes.install(server)
    return server


def session_manager(
    server: Server[Any], limits: HttpLimits, *, streaming: bool = False
) -> StreamableHTTPSessionManager:
    """The SDK's stateless request manager for `server` (run it in the lifespan).

    It answers with one JSON document, or with `streaming` as an SSE stream that carries the
    request's notifications (progress) before its result.
    """
    return StreamableHTTPSessionManager(
        app=server,
        json_response=not streaming,
        stateless=True,
        max_request_body_size=limits.max_body_bytes,
        # Host and Origin are checked by RequestGuard for every route, with Anvil's settings.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )


def mcp_endpoint(manager: StreamableHTTPSessionManager, streaming: StreamableHTTPSessionManager) -> ASGIApp:
    """The ASGI app for `POST /mcp` (the guard has already refused other methods and oversized
    bodies): the SDK's JSON request manager; a request that asks for progress goes to the SDK's
    `streaming` manager instead."""
    return McpEndpoint(StreamableHTTPASGIApp(manager), StreamableHTTPASGIApp(streaming))


class McpEndpoint:
    """ASGI app, the one door of every `POST /mcp`: a protocol version Anvil does not serve is
    answered here (`spec_fixes` entry 2), and so is a body that is not one JSON-RPC message
    (entry 4); a request with a `progressToken` whose client reads
    SSE is answered as a stream (its progress notifications, then its result); every other
    request as one JSON document by the SDK.

    It reads what the layers before it kept (`app.http.received`): the header fields, and the
    body `BodyGuard` read, which it decodes once (`spec_fixes.checked_message`) and hands to
    the progress check decoded. The SDK gets the request as ASGI and nothing decoded: its
    public entry (`StreamableHTTPASGIApp`, the session manager's `handle_request`) takes
    `scope, receive, send` only, and its transport reads the body from `receive` (BodyGuard's
    replay of it) and parses it again itself.
    """

    def __init__(self, default: ASGIApp, streaming: ASGIApp) -> None:
        self.default = default
        self.streaming = streaming

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        head = head_of(scope)
        body = body_of(scope)
        version = head.protocol_version
        if version is not None and version not in spec_fixes.SERVED_VERSIONS:
            await spec_fixes.unsupported_version(version, body)(scope, receive, send)
            return
        message = spec_fixes.checked_message(head, body)
        if isinstance(message, Response):
            await message(scope, receive, send)
        elif wants_progress(head.accept, body, message):
            await self.streaming(scope, receive, send)
        else:
            await self.default(scope, receive, send)
