"""`anvil bridge`: a stdio MCP server that forwards every request to a remote Anvil.

Hosts that only start local servers over stdio (Claude Desktop, older IDE plug-ins, scripts) run
`anvil bridge --url https://host/mcp`. The bridge is the SDK's own low-level server on stdio,
facing the host in whichever protocol era the host opens with, and the SDK's own client on
Streamable HTTP, facing Anvil: tools, results, JSON-RPC errors and progress notifications pass
through unchanged. Nothing here parses or writes JSON-RPC.

Sign-in is a `TokenSource` (none for a server without sign-in): a fixed token (`--token` or
`ANVIL_TOKEN`), a dev token minted from the local data folder's key (a local dev server), or the
signed-in user's Entra token from the MSAL cache (`anvil login`). `BearerAuth` puts it on every
HTTP request, renews it shortly before it expires, and after a 401 asks the source for a fresh
token once and resends the request.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
import jwt
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from app import __version__
from app.client.errors import EXIT_PROBLEM, EXIT_SIGN_IN, EXIT_UNREACHABLE, ClientError
from app.client.tokens import TokenSource
from app.errors import retry_after_seconds

#: A token is renewed this many seconds before its `exp`, so no request carries one that expires
#: on the way (Entra's own clients renew five minutes ahead too).
RENEW_BEFORE_SECONDS = 300.0
#: The SDK client's stand-in message for an HTTP error status without a JSON-RPC body.
_SDK_HTTP_ERROR = "Server returned an error response"

T = TypeVar("T")


@dataclass(frozen=True)
class HttpFailure:
    """An HTTP error status the server answered with, and what its problem document said."""

    status: int
    detail: str | None
    #: Seconds the server asked to wait (`Retry-After`), if it did.
    retry_after: float | None

    def describe(self, url: str, sign_in_hint: str | None = None) -> str:
        """One line for the host (and the model reading the error); `sign_in_hint` follows a 401."""
        text = f"{url} answered HTTP {self.status}"
        if self.status == 401:
            text = f"{url} refused sign-in (HTTP 401)"
        if self.detail:
            text = f"{text}: {self.detail}"
        if self.retry_after is not None:
            text = f"{text} (retry after {math.ceil(self.retry_after)} s)"
        if self.status == 401 and sign_in_hint:
            text = f"{text} ({sign_in_hint})"
        return text


def _expiry(token: str) -> float | None:
    """The token's `exp` (seconds since the epoch) if it is a JWT carrying one, else None.

    The bridge only schedules renewal with it; the server verifies the token.
    """
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, int | float) else None


class BearerAuth(httpx2.Auth):
    """Bearer tokens from a `TokenSource` on every request, with one renewal after a 401.

    Concurrent requests share one token; when several are refused with the same token, only the
    first asks the source for a new one and the others resend with it. The last HTTP error status
    is kept so the bridge can tell the host what went wrong (the SDK client reports every HTTP
    error status without a JSON-RPC body as one generic error).
    """

    def __init__(self, source: TokenSource | None, *, clock: Callable[[], float] = time.time) -> None:
        self._source = source
        self._clock = clock
        self._lock = anyio.Lock()
        self._current: str | None = None
        self._expires: float | None = None
        #: How many times a refused token was renewed.
        self.renewals = 0
        self.last_failure: HttpFailure | None = None
        #: Why the source gave no token for the last request that needed one, else None.
        self.source_error: str | None = None

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self._token() if self._source is not None else None
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        renewable = token is not None and self._source is not None and self._source.renewable
        if response.status_code == 401 and renewable and (renewed := await self._token(refused=token)):
            request.headers["Authorization"] = f"Bearer {renewed}"
            response = yield request
        if response.status_code >= 400:
            await self._remember(response)

    async def _token(self, *, refused: str | None = None) -> str | None:
        """The token to send (renewed when `refused` is the current one), or None when the source
        failed; `source_error` then says why (e.g. the user has to sign in again)."""
        assert self._source is not None
        async with self._lock:
            try:
                if refused is not None and refused == self._current:
                    self._current = await anyio.to_thread.run_sync(self._source.get, True)
                    self._expires = _expiry(self._current)
                    self.renewals += 1
                elif self._current is None or (
                    self._expires is not None and self._clock() >= self._expires - RENEW_BEFORE_SECONDS
                ):
                    self._current = await anyio.to_thread.run_sync(self._source.get, False)
                    self._expires = _expiry(self._current)
            except Exception as error:  # the source's own one-line message (MSAL, the dev key)
                self.source_error = str(error)
                return None
            self.source_error = None
            return self._current

    async def _remember(self, response: httpx2.Response) -> None:
        detail = None
        if response.headers.get("content-type", "").startswith("application/problem+json"):
            try:
                await response.aread()
                body = response.json()
            except (httpx2.HTTPError, ValueError):
                body = None
            if isinstance(body, dict) and isinstance(body.get("detail"), str):
                detail = body["detail"].rstrip(".")
        self.last_failure = HttpFailure(response.status_code, detail, retry_after_seconds(response.headers))


def mcp_endpoint(url: str) -> str:
    """The MCP endpoint for a server URL given either as the base (`https://host`) or `.../mcp`."""
    url = url.rstrip("/")
    return url if url.endswith("/mcp") else f"{url}/mcp"


class Bridge:
    """The stdio-facing server's handlers, each forwarding to the connected remote client."""

    def __init__(self, remote: Client, auth: BearerAuth, url: str, sign_in_hint: str | None = None) -> None:
        self._remote = remote
        self._auth = auth
        self._url = url
        self._hint = sign_in_hint

    def server(self) -> Server[Any]:
        """The low-level server the host talks to: the remote's name, version, instructions and
        the request kinds the remote offers."""
        info = self._remote.server_info
        capabilities = self._remote.server_capabilities
        handlers: dict[str, Any] = {}
        if capabilities.tools is not None:
            handlers.update(on_list_tools=self.list_tools, on_call_tool=self.call_tool)
        if capabilities.resources is not None:
            handlers.update(
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_resource_templates,
                on_read_resource=self.read_resource,
            )
        if capabilities.prompts is not None:
            handlers.update(on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt)
        return Server(
            info.name if info else "anvil",
            version=info.version if info else __version__,
            title=info.title if info else None,
            instructions=self._remote.instructions,
            **handlers,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return await self._forward(
            lambda: self._remote.list_tools(cursor=_cursor(params), cache_mode="bypass")
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        async def relay(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        return await self._forward(
            lambda: self._remote.call_tool(params.name, params.arguments, progress_callback=relay)
        )

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return await self._forward(
            lambda: self._remote.list_resources(cursor=_cursor(params), cache_mode="bypass")
        )

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return await self._forward(
            lambda: self._remote.list_resource_templates(cursor=_cursor(params), cache_mode="bypass")
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await self._forward(lambda: self._remote.read_resource(params.uri, cache_mode="bypass"))

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return await self._forward(
            lambda: self._remote.list_prompts(cursor=_cursor(params), cache_mode="bypass")
        )

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        return await self._forward(lambda: self._remote.get_prompt(params.name, params.arguments))

    async def _forward(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run `call` on the remote; a JSON-RPC error passes through as it came, an HTTP error
        status or a transport failure becomes an error naming the server and the cause."""
        try:
            return await call()
        except MCPError as error:
            failure = self._auth.last_failure
            if error.message == _SDK_HTTP_ERROR and failure is not None:
                raise MCPError(
                    error.code, failure.describe(self._url, self._auth.source_error or self._hint)
                ) from None
            raise
        except httpx2.TransportError as error:
            raise MCPError(types.INTERNAL_ERROR, f"{self._url} could not be reached: {error}") from None


def _cursor(params: types.PaginatedRequestParams | None) -> str | None:
    return params.cursor if params is not None else None


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or the exception itself."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


async def connect(
    url: str, source: TokenSource | None, stack: AsyncExitStack, sign_in_hint: str | None = None
) -> tuple[Client, BearerAuth]:
    """A client connected to the MCP endpoint at `url` (in the newest era both sides speak);
    `ClientError` when it cannot be."""
    auth = BearerAuth(source)
    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            auth=auth,
            headers={"User-Agent": f"anvil-bridge/{__version__}"},
            # A model may take minutes to answer; connecting should not.
            timeout=httpx2.Timeout(300.0, connect=10.0),
        )
    )
    client = Client(
        streamable_http_client(url, http_client=http),
        mode="auto",
        cache=None,
        client_info=types.Implementation(name="anvil-bridge", version=__version__),
    )
    try:
        await stack.enter_async_context(client)
    except Exception as error:
        raise _connect_failure(url, error, auth.last_failure, auth.source_error or sign_in_hint) from None
    return client, auth


def _connect_failure(
    url: str, error: Exception, failure: HttpFailure | None, sign_in_hint: str | None
) -> ClientError:
    leaves = _leaves(error)
    if failure is not None:
        code = EXIT_SIGN_IN if failure.status in (401, 403) else EXIT_PROBLEM
        return ClientError(failure.describe(url, sign_in_hint), code)
    for leaf in leaves:
        if isinstance(leaf, httpx2.TransportError):
            return ClientError(f"{url} could not be reached: {leaf or type(leaf).__name__}", EXIT_UNREACHABLE)
    for leaf in leaves:
        if isinstance(leaf, MCPError):
            return ClientError(f"{url} refused to connect: {leaf.message}", EXIT_PROBLEM)
    return ClientError(f"{url} refused to connect: {leaves[0]!r}", EXIT_PROBLEM)


async def serve_stdio(url: str, source: TokenSource | None, sign_in_hint: str | None = None) -> None:
    """Connect to `url`, then serve the host on stdin/stdout until it closes them; `sign_in_hint`
    is added to the message of a refused sign-in."""
    async with AsyncExitStack() as stack:
        remote, auth = await connect(url, source, stack, sign_in_hint)
        server = Bridge(remote, auth, url, sign_in_hint).server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
