"""What a request brought, read once and kept in its ASGI scope for every layer after.

`head_of` reads the header fields Anvil's layers look at in one pass over the headers (the
guard's Host, Origin and Content-Length, sign-in's Authorization, the MCP endpoint's Accept,
Content-Type and MCP-Protocol-Version); `BodyGuard` keeps the body it read (`keep_body`) for the
MCP endpoint and the REST routes (`body_of`). Each is kept under a scope key of Anvil's own, so
no layer scans the headers or reads `receive` again.
"""

from __future__ import annotations

from typing import NamedTuple

from starlette.types import Scope

#: Scope keys of Anvil's own (no server or framework sets keys with this prefix).
HEAD = "anvil.head"
BODY = "anvil.body"


class RequestHead(NamedTuple):
    """The header fields Anvil reads, latin-1 decoded, without surrounding whitespace. Of a
    repeated field the first counts, as in every reader of these fields (the SDK's included);
    Authorization keeps them all, as sign-in refuses more than one."""

    host: str
    origin: str | None
    content_length: str | None
    authorization: tuple[str, ...]
    accept: str
    content_type: str
    protocol_version: str | None


def head_of(scope: Scope) -> RequestHead:
    """The request's `RequestHead`, read on the first call.

    That first call also takes the spaces and tabs around every header value off
    `scope["headers"]` (RFC 9110, 5.5: they are not part of the value), in the same pass, so
    that every later reader sees the values without them (`app.mcp_server.spec_fixes` entry 3:
    the SDK compares its routing headers exactly). `RequestGuard` makes that call for every
    request but the probes.
    """
    head: RequestHead | None = scope.get(HEAD)
    if head is None:
        head = scope[HEAD] = _read(scope)
    return head


def keep_body(scope: Scope, body: bytes) -> None:
    """Keep the whole body `BodyGuard` read for the layers after it."""
    scope[BODY] = body


def body_of(scope: Scope) -> bytes:
    """The body `BodyGuard` read, which it keeps for every POST, PUT and PATCH it lets through."""
    body: bytes = scope[BODY]
    return body


_FIELDS = frozenset(
    {b"host", b"origin", b"content-length", b"accept", b"content-type", b"mcp-protocol-version"}
)


def _read(scope: Scope) -> RequestHead:
    stripped: list[tuple[bytes, bytes]] = []
    fields: dict[bytes, str] = {}
    authorization: list[str] = []
    for name, raw in scope["headers"]:
        value = raw.strip(b" \t")
        stripped.append((name, value))
        if name == b"authorization":
            authorization.append(value.decode("latin-1"))
        elif name in _FIELDS and name not in fields:
            fields[name] = value.decode("latin-1")
    scope["headers"] = stripped
    return RequestHead(
        host=fields.get(b"host", ""),
        origin=fields.get(b"origin"),
        content_length=fields.get(b"content-length"),
        authorization=tuple(authorization),
        accept=fields.get(b"accept", ""),
        content_type=fields.get(b"content-type", ""),
        protocol_version=fields.get(b"mcp-protocol-version"),
    )
