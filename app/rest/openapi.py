"""The OpenAPI 3.1 document the app serves at `/openapi.json`, and API Management imports.

FastAPI writes the REST routes' part from the operations' models; this module adds what it
cannot know: the parameters and body of each route from its arguments model with the limits the
settings configure (`documented_inputs`), every status a route can answer (`responses_of`): the
operation's own, and those of the layers every request passes (`EVERY_ROUTE`), the links
between the conversation routes, the problem document, bearer sign-in, and `POST /mcp` with the
JSON-RPC messages it takes and answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.operations.operation import Operation
from app.operations.schemas import arguments_schema
from app.settings.history import HistorySettings
from app.settings.serve import HttpLimits

#: How the OpenAPI document describes every error response.
PROBLEM_RESPONSE: dict[str, Any] = {
    "description": "Problem document (RFC 9457) saying what to change",
    "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
}

#: Statuses any request to a signed-in route can get before (or besides) its operation: the
#: front door (408 for a head or a body too slow, 431), `RequestGuard` (421, 403, 413), sign-in
#: (401, 403, and 400 for two Authorization headers), `BodyGuard` (413), the rate limit (429),
#: the unexpected (500), an unreachable dependency or a full process (503).
EVERY_ROUTE = (400, 401, 403, 408, 413, 421, 429, 431, 500, 503)
#: Statuses a probe can get: the front door, the unexpected, a full process.
EVERY_PROBE = (408, 431, 500, 503)


def status_meanings(settings: HttpLimits) -> dict[int, str]:
    """What each error status means on Anvil's routes, with the limits in force."""
    return {
        400: "The arguments (or the request) break a rule; the detail names it and what to change",
        401: (
            "Sign-in required, or the access token is not valid; WWW-Authenticate names the "
            "protected-resource metadata"
        ),
        403: (
            "The token lacks a required scope, the browser Origin is not accepted "
            "(ANVIL_ALLOWED_ORIGINS), or the operation needs a signed-in user"
        ),
        404: "Not found; the detail says what to pass instead",
        408: (
            f"The request line and headers did not arrive within {settings.header_timeout_seconds:g} s "
            f"(ANVIL_HEADER_TIMEOUT_SECONDS), or the body within {settings.body_timeout_seconds:g} s "
            "(ANVIL_BODY_TIMEOUT_SECONDS); the connection is closed"
        ),
        409: (
            "The request conflicts with what is stored (a conversation or clientRequestId in use), "
            "or the user keeps ANVIL_MAX_CONVERSATIONS_PER_USER conversations already"
        ),
        413: f"The request body is larger than {settings.max_body_bytes} bytes (ANVIL_MAX_BODY_BYTES)",
        421: "This Host is not served here (ANVIL_ALLOWED_HOSTS)",
        429: (
            "Too many requests from this caller (ANVIL_RATE_LIMIT_PER_MINUTE); Retry-After says when to retry"
        ),
        431: (
            f"The request line and headers are larger than {settings.max_header_bytes} bytes "
            "(ANVIL_MAX_HEADER_BYTES); the connection is closed"
        ),
        500: "Anvil failed unexpectedly; the detail and X-Correlation-Id carry the id to report",
        502: "The language model failed or could not be reached; ask again",
        503: (
            "A dependency (the store, the signing keys) is unreachable or the process is stopping: "
            "retry. A process serving ANVIL_MAX_CONCURRENT_REQUESTS already answers with plain text"
        ),
    }


def error_response_of(status: int, meanings: dict[int, str]) -> dict[str, Any]:
    """The OpenAPI response of an error status: a problem document (503 may be plain text)."""
    response: dict[str, Any] = {**PROBLEM_RESPONSE, "description": meanings[status]}
    if status == 503:
        # The HTTP server's own refusal when the process is full.
        response["content"] = {**PROBLEM_RESPONSE["content"], "text/plain": {"schema": {"type": "string"}}}
    return response


def responses_of(statuses: Iterable[int], settings: HttpLimits) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of these error statuses, in order."""
    meanings = status_meanings(settings)
    return {status: error_response_of(status, meanings) for status in sorted(set(statuses))}


def _path_names(operation: Operation[Any, Any]) -> set[str]:
    return {part[1:-1] for part in operation.route.path.split("/") if part.startswith("{")}


def documented_inputs(operation: Operation[Any, Any], settings: HistorySettings) -> dict[str, Any]:
    """The OpenAPI `parameters` and `requestBody` of a route, from its arguments model."""
    schema = arguments_schema(operation.arguments, settings)
    properties: dict[str, Any] = schema.get("properties", {})
    if not properties:
        return {}
    required = set(schema.get("required", []))
    path_names = _path_names(operation)
    if operation.route.method == "POST":
        return {
            "requestBody": {
                "required": bool(required),
                "content": {"application/json": {"schema": schema}},
            }
        }
    parameters = []
    for name, field_schema in properties.items():
        # An optional argument is simply left out of a query, never sent as null.
        variants = [v for v in field_schema.get("anyOf", [field_schema]) if v.get("type") != "null"]
        described = {k: v for k, v in variants[0].items() if k not in ("title", "description")}
        parameters.append(
            {
                "name": name,
                "in": "path" if name in path_names else "query",
                "required": name in path_names or name in required,
                "description": field_schema.get("description", ""),
                "schema": described,
            }
        )
    return {"parameters": parameters}


#: Where a route's result names a conversation (an OpenAPI runtime expression), for the links
#: that tell a client, or a test generator, which routes take it next.
CONVERSATION_IN_RESULT = {
    "startConversation": "$response.body#/conversationId",
    "listConversations": "$response.body#/conversations/0/conversationId",
}
#: The routes that take a conversation by its id.
CONVERSATION_ROUTES = ("getConversation", "deleteConversation")


def links_of(operation: Operation[Any, Any]) -> dict[int | str, dict[str, Any]]:
    """The success response's OpenAPI links, for a route whose result names a conversation."""
    found = CONVERSATION_IN_RESULT.get(operation.route.operation_id)
    if found is None:
        return {}
    links = {
        target: {"operationId": target, "parameters": {"conversationId": found}}
        for target in CONVERSATION_ROUTES
    }
    return {operation.route.status_code: {"links": links}}


_COMPONENT = "#/components/schemas/"
_JSON_RPC_ID = {
    "description": "A string or an integer (never null, MCP's rule)",
    "anyOf": [{"type": "string"}, {"type": "integer"}],
}
_JSON_RPC_VERSION = {"type": "string", "enum": ["2.0"]}
#: Left out or null: both mean no parameters.
_JSON_RPC_PARAMS = {"anyOf": [{"type": "object"}, {"type": "null"}]}
#: The messages `POST /mcp` takes and answers, as JSON-RPC 2.0 and MCP define them. Members a
#: message may carry besides these are ignored, so none is forbidden.
JSON_RPC_SCHEMAS: dict[str, Any] = {
    # What a client sends. The transport also takes a response (202, ignored), which only
    # answers a request the server sent; a stateless server sends none, so none is described.
    "JsonRpcMessage": {
        "description": "One JSON-RPC 2.0 message: a request or a notification",
        "anyOf": [{"$ref": _COMPONENT + "JsonRpcRequest"}, {"$ref": _COMPONENT + "JsonRpcNotification"}],
    },
    "JsonRpcRequest": {
        "type": "object",
        "description": "A call of `method`, answered with a response that carries the same id",
        "properties": {
            "jsonrpc": _JSON_RPC_VERSION,
            "id": _JSON_RPC_ID,
            "method": {"type": "string", "description": "e.g. initialize, tools/list, tools/call"},
            "params": _JSON_RPC_PARAMS,
        },
        "required": ["jsonrpc", "method", "id"],
    },
    "JsonRpcNotification": {
        "type": "object",
        "description": "A message without an id, which gets no response",
        "properties": {
            "jsonrpc": _JSON_RPC_VERSION,
            "method": {"type": "string"},
            "params": _JSON_RPC_PARAMS,
        },
        "required": ["jsonrpc", "method"],
        "not": {"required": ["id"]},
    },
    "JsonRpcResult": {
        "type": "object",
        "description": "The result of the request with this id",
        "properties": {"jsonrpc": _JSON_RPC_VERSION, "id": _JSON_RPC_ID, "result": {"type": "object"}},
        "required": ["jsonrpc", "id", "result"],
    },
    "JsonRpcError": {
        "type": "object",
        "description": "Why the request with this id failed; id is null when it could not be read",
        "properties": {
            "jsonrpc": _JSON_RPC_VERSION,
            "id": {"anyOf": [*_JSON_RPC_ID["anyOf"], {"type": "null"}]},
            "error": {
                "type": "object",
                "properties": {
                    "code": {"type": "integer"},
                    "message": {"type": "string"},
                    "data": {},
                },
                "required": ["code", "message"],
            },
        },
        "required": ["jsonrpc", "id", "error"],
    },
    "JsonRpcResponse": {
        "description": "The response to a request: its result, or an error",
        "anyOf": [{"$ref": _COMPONENT + "JsonRpcResult"}, {"$ref": _COMPONENT + "JsonRpcError"}],
    },
}


def build_openapi(api: FastAPI, limits: HttpLimits, *, base_url: str) -> dict[str, Any]:
    """The OpenAPI document API Management imports: REST routes, `/mcp`, and bearer sign-in, for
    Anvil at `base_url` with the `limits` in force."""
    schema = get_openapi(
        title=api.title,
        version=api.version,
        description=api.description,
        routes=api.routes,
        servers=[{"url": base_url}],
    )
    components = schema.setdefault("components", {})
    components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}}
    components.setdefault("schemas", {})["Problem"] = {
        "type": "object",
        "description": "RFC 9457 problem document",
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string", "description": "What went wrong and what to change."},
        },
        "required": ["type", "title", "status", "detail"],
    }
    for path, operations in schema["paths"].items():
        if path.startswith("/api/"):
            for operation in operations.values():
                operation["security"] = [{"bearer": []}]
    components["schemas"].update(JSON_RPC_SCHEMAS)
    mcp_errors = responses_of(EVERY_ROUTE, limits)
    mcp_errors[400] = {
        # No media type: the SDK answers a body not sent as application/json with plain text
        # and no Content-Type; every other 400 here is a JSON-RPC error (`JsonRpcError`).
        "description": (
            "A JSON-RPC error (`JsonRpcError`, application/json): the body is not one JSON-RPC "
            "message (-32700, -32600, with id null), the protocol revision is not served (-32022), "
            "or its headers are missing or do not match the body. A body not sent as "
            "application/json gets the text `Invalid Content-Type header`; two Authorization "
            "headers, a problem document"
        )
    }
    mcp_errors[406] = {
        "description": "Accept names neither application/json nor text/event-stream",
        "content": {"application/json": {"schema": {"$ref": _COMPONENT + "JsonRpcError"}}},
    }
    mcp_errors[415] = {
        "description": "The Content-Type is a JSON type other than application/json",
        "content": {"application/json": {"schema": {"$ref": _COMPONENT + "JsonRpcError"}}},
    }
    mcp_errors = dict(sorted(mcp_errors.items(), key=lambda item: int(item[0])))
    schema["paths"]["/mcp"] = {
        "post": {
            "operationId": "mcp",
            "summary": "MCP Streamable HTTP endpoint (JSON-RPC 2.0, stateless, every protocol revision)",
            "description": (
                "One JSON-RPC 2.0 message a POST, as the MCP Streamable HTTP transport sends it: a "
                "request, answered with its response, or a notification, accepted with 202. A batch "
                "(a JSON array) is refused. Send `Accept: application/json, "
                "text/event-stream`; from protocol revision 2026-07-28 on, also the "
                "`MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers that revision asks for. "
                "A request with a progressToken may be answered as an event stream."
            ),
            "tags": ["mcp"],
            "security": [{"bearer": []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": _COMPONENT + "JsonRpcMessage"}}},
            },
            "responses": {
                "200": {
                    "description": "The request's JSON-RPC response: its result, or a JSON-RPC error",
                    "content": {
                        "application/json": {"schema": {"$ref": _COMPONENT + "JsonRpcResponse"}},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                "202": {"description": "A notification, accepted; no body"},
                **{str(status): response for status, response in mcp_errors.items()},
            },
        }
    }
    return schema
