"""The REST surface for API Management and curl, generated from the same operations as MCP.

Each operation becomes one route: path parameters, query (GET, DELETE) or JSON body (POST) are
gathered into one mapping and checked by the operation's arguments model, exactly as a tool
call's arguments are; the result is the operation's result model. The OpenAPI document
describes the parameters and body from that same model.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint annotations at runtime.

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.health import liveness, readiness
from app.api.operations import OPERATIONS, Call, Operation
from app.api.signin import principal_of
from app.errors import InvalidInput, problem_response
from app.runtime import runtime_of
from app.settings import Settings

WELL_KNOWN = "/.well-known/oauth-protected-resource"


#: How the OpenAPI document describes every error response.
PROBLEM_RESPONSE: dict[str, Any] = {
    "description": "Problem document (RFC 9457) saying what to change",
    "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
}


def _path_names(operation: Operation[Any, Any]) -> set[str]:
    return {part[1:-1] for part in operation.route.path.split("/") if part.startswith("{")}


def _documented_inputs(operation: Operation[Any, Any]) -> dict[str, Any]:
    """The OpenAPI `parameters` and `requestBody` of a route, from its arguments model."""
    schema = operation.arguments.model_json_schema(by_alias=True)
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


def _endpoint(operation: Operation[Any, Any]) -> Any:
    status = operation.route.status_code
    takes_body = operation.route.method == "POST"
    # Query parameters that are not arguments are left alone (gateways and browsers add their
    # own, such as a cache buster); a JSON body is checked whole.
    names = {field.alias or name for name, field in operation.arguments.model_fields.items()}

    async def endpoint(request: Request) -> Response:
        arguments: dict[str, Any] = {k: v for k, v in request.query_params.items() if k in names}
        if takes_body:
            arguments.update(await _json_object(request))
        arguments.update(request.path_params)
        parsed = operation.parse(arguments)
        call = Call(runtime_of(request.scope), principal_of(request.scope))
        output = await operation.handler(call, parsed)
        return Response(
            output.model_dump_json(by_alias=True), status_code=status, media_type="application/json"
        )

    endpoint.__name__ = operation.name
    return endpoint


async def _json_object(request: Request) -> dict[str, Any]:
    body = await request.body()
    if not body.strip():
        return {}
    try:
        decoded = json.loads(body)
    except ValueError:
        raise InvalidInput(
            "The request body is not valid JSON: send a JSON object of the arguments."
        ) from None
    if not isinstance(decoded, dict):
        raise InvalidInput("The request body must be a JSON object of the arguments.")
    return decoded


def add_routes(router: FastAPI, settings: Settings) -> None:
    """Add the REST routes of every operation, the health probes and the sign-in metadata."""
    for operation in OPERATIONS:
        route = operation.route
        router.add_api_route(
            route.path,
            _endpoint(operation),
            methods=[route.method],
            response_model=operation.result,
            status_code=route.status_code,
            summary=route.summary,
            description=operation.describe(settings),
            operation_id=route.operation_id,
            tags=[route.tag],
            responses={status: PROBLEM_RESPONSE for status in (*route.errors, 401)},
            openapi_extra=_documented_inputs(operation),
        )

    @router.get("/healthz", summary="Liveness", operation_id="healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return liveness()

    @router.get(
        "/readyz",
        summary="Readiness: store and key source reachable",
        operation_id="readyz",
        tags=["health"],
        responses={503: {"description": "A dependency is not reachable"}},
    )
    async def readyz(request: Request) -> JSONResponse:
        draining = bool(getattr(request.app.state, "draining", False))
        return await readiness(runtime_of(request.scope), draining=draining)

    async def resource_metadata(request: Request) -> Response:
        document = runtime_of(request.scope).resource_metadata
        if document is None:
            return problem_response(404, "Sign-in is off on this server (ANVIL_AUTH_MODE=none).")
        return JSONResponse(document, headers={"Cache-Control": "public, max-age=3600"})

    router.add_api_route(WELL_KNOWN, resource_metadata, methods=["GET"], include_in_schema=False)
    router.add_api_route(WELL_KNOWN + "/mcp", resource_metadata, methods=["GET"], include_in_schema=False)


def build_openapi(api: FastAPI, settings: Settings) -> dict[str, Any]:
    """The OpenAPI document API Management imports: REST routes, `/mcp`, and bearer sign-in."""
    schema = get_openapi(
        title=api.title,
        version=api.version,
        description=api.description,
        routes=api.routes,
        servers=[{"url": settings.base_url}],
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
    schema["paths"]["/mcp"] = {
        "post": {
            "operationId": "mcp",
            "summary": "MCP Streamable HTTP endpoint (JSON-RPC 2.0, stateless, every protocol revision)",
            "tags": ["mcp"],
            "security": [{"bearer": []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {
                "200": {"description": "JSON-RPC response", "content": {"application/json": {}}},
                "202": {"description": "Notification accepted"},
                "400": {"description": "JSON-RPC error (e.g. -32022 unsupported protocol version)"},
                "401": PROBLEM_RESPONSE
                | {"description": "Sign-in required; WWW-Authenticate names the metadata"},
            },
        }
    }
    return schema
