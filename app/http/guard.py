"""The checks every request passes before any route runs, in two stages around sign-in.

`RequestGuard`, from the headers alone and before sign-in: Host (421, DNS-rebinding defence),
browser Origin (403), method on `/mcp` (405), a declared body larger than the limit (413).

`BodyGuard`, after sign-in, so that a caller without a valid token never gets to send a body:
the body must stay within the limit (413, before anything parses it). One place for them, so
REST and MCP behave alike (what only MCP checks, such as its protocol version, is
`app.mcp_server`'s). The body's deadline (408) is kept by the front door
(`app.serve.frontdoor`), which sees when a body stops arriving without a timer per request.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.http.problems import problem_response
from app.http.received import RequestHead, head_of, keep_body

MCP_PATH = "/mcp"
#: Probes answer whatever Host the platform's health checker uses.
UNGUARDED_PATHS = frozenset({"/healthz", "/readyz"})


def matches(value: str, patterns: Sequence[str]) -> bool:
    """Whether a Host or Origin value matches one of `patterns` (`x:*` = any port, `*` = anything)."""
    for pattern in patterns:
        if pattern in ("*", value):
            return True
        if pattern.endswith(":*"):
            base = pattern[:-2]
            port = value[len(base) + 1 :] if value.startswith(base + ":") else None
            if value == base or (port is not None and port.isdigit()):
                return True
    return False


class RequestGuard:
    """ASGI middleware applying the pre-route checks described in the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Sequence[str],
        allowed_origins: Sequence[str],
        max_body_bytes: int,
    ) -> None:
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)
        self.allowed_origins = tuple(allowed_origins)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNGUARDED_PATHS:
            await self.app(scope, receive, send)
            return
        # Read here for every later layer, header values stripped of surrounding whitespace.
        head = head_of(scope)
        refusal = self._refusal(scope, head)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        declared = head.content_length
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await too_large(self.max_body_bytes)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope, head: RequestHead) -> Response | None:
        if not matches(head.host, self.allowed_hosts):
            return problem_response(
                421, "This Host is not served here; add it to ANVIL_ALLOWED_HOSTS.", kind="host"
            )
        if head.origin is not None and not matches(head.origin, self.allowed_origins):
            return problem_response(
                403,
                "Requests from this browser Origin are not accepted; add it to ANVIL_ALLOWED_ORIGINS.",
                kind="origin",
            )
        if scope["path"] == MCP_PATH and scope["method"] != "POST":
            return problem_response(
                405,
                "Anvil's MCP endpoint is stateless Streamable HTTP: send each JSON-RPC message as a POST. "
                "The HTTP+SSE transport of 2024-11-05 (a GET that opens an event stream) is not served; "
                "such a client can start `anvil bridge` as a local stdio server instead.",
                kind="method",
                headers={"Allow": "POST"},
            )
        return None


def too_large(limit: int) -> Response:
    return problem_response(413, f"The request body is larger than {limit} bytes.", kind="too-large")


#: What `BodyGuard` answers when the connection ends before the body has (the front door's body
#: deadline, or a client that left). Nobody receives it; it is sent so that the access log and
#: the request metrics record the 408 the client got, not the 500 of an app that never answered.
BODY_NEVER_CAME = "The request body did not arrive; send it at once, then retry."


class BodyGuard:
    """ASGI middleware: reads a POST body within `max_body_bytes` and keeps it in the scope
    (`app.http.received.body_of`) for the MCP endpoint and the REST routes. What comes after
    also gets a `receive` that replays it, for whatever reads a body the ASGI way: the MCP SDK's
    transport, which reads it so."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("POST", "PUT", "PATCH")
            or scope["path"] in UNGUARDED_PATHS
        ):
            await self.app(scope, receive, send)
            return
        message = await receive()
        body: bytes = message.get("body", b"")
        if message["type"] == "http.request" and message.get("more_body", False):
            chunks = bytearray(body)
            # Up to one chunk past the limit, then refused without reading the rest.
            while len(chunks) <= self.max_body_bytes:
                message = await receive()
                chunks += message.get("body", b"")
                if message["type"] != "http.request" or not message.get("more_body", False):
                    break
            body = bytes(chunks)
        if message["type"] != "http.request":
            # The connection ended first: the route must not run on part of a body.
            await problem_response(408, BODY_NEVER_CAME, kind="timeout", headers={"Connection": "close"})(
                scope, receive, send
            )
            return
        if len(body) > self.max_body_bytes:
            await too_large(self.max_body_bytes)(scope, receive, send)
            return
        keep_body(scope, body)
        await self.app(scope, replay_body(body, receive), send)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields the already-read body once, then defers to the server."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
