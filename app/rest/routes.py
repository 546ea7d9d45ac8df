"""The REST surface for API Management and curl, generated from the same operations as MCP.

Each operation becomes one route: path parameters, query (GET, DELETE) or JSON body (POST) are
gathered into one mapping and checked by the operation's arguments model, exactly as a tool
call's arguments are; the result is the operation's result model. How each route is described
in the OpenAPI document comes from `app.rest.openapi`.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint annotations at runtime.

from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.errors import InvalidInput
from app.http.health import liveness, readiness
from app.http.json_text import NotJson, decode
from app.http.received import body_of
from app.http.signin import principal_of
from app.operations.catalog import OPERATIONS
from app.operations.operation import Call, Described, Operation
from app.rest.openapi import EVERY_PROBE, EVERY_ROUTE, documented_inputs, links_of, responses_of
from app.runtime import runtime_of
from app.settings.history import HistorySettings
from app.settings.serve import HttpLimits


def _endpoint(operation: Operation[Any, Any], history: HistorySettings) -> Any:
    status = operation.route.status_code
    takes_body = operation.route.method == "POST"
    # Query parameters that are not arguments are left alone (gateways and browsers add their
    # own, such as a cache buster); a JSON body is checked whole.
    names = {field.alias or name for name, field in operation.arguments.model_fields.items()}

    async def endpoint(request: Request) -> Response:
        arguments: dict[str, Any] = {k: v for k, v in request.query_params.items() if k in names}
        if takes_body:
            arguments.update(_json_object(body_of(request.scope)))
        arguments.update(request.path_params)
        parsed = operation.parse(arguments, history)
        call = Call(runtime_of(request.scope), principal_of(request.scope))
        output = await operation.handler(call, parsed)
        return Response(
            output.model_dump_json(by_alias=True), status_code=status, media_type="application/json"
        )

    endpoint.__name__ = operation.name
    return endpoint


def _json_object(body: bytes) -> dict[str, Any]:
    """The arguments in a POST body (as `BodyGuard` read and kept it); no body at all is none."""
    if not body:
        return {}
    try:
        decoded = decode(body)
    except NotJson as error:
        raise InvalidInput(
            f"The request body is not valid JSON ({error}): send a JSON object of the arguments, "
            "or no body at all."
        ) from None
    if not isinstance(decoded, dict):
        raise InvalidInput("The request body must be a JSON object of the arguments.")
    return decoded


def add_routes(
    router: FastAPI,
    *,
    limits: HttpLimits,
    history: HistorySettings,
    named: tuple[str | None, str | None] = (None, None),
) -> None:
    """Add the REST routes of every operation and the health probes, documented with the
    `limits` and `history` bounds in force and the knowledge the settings name."""
    described = Described(history, *named)
    for operation in OPERATIONS:
        route = operation.route
        router.add_api_route(
            route.path,
            _endpoint(operation, history),
            methods=[route.method],
            response_model=operation.result,
            status_code=route.status_code,
            summary=route.summary,
            description=operation.describe(described),
            operation_id=route.operation_id,
            tags=[route.tag],
            responses={**links_of(operation), **responses_of((*route.errors, *EVERY_ROUTE), limits)},
            openapi_extra=documented_inputs(operation, history),
        )

    probe_errors = responses_of(EVERY_PROBE, limits)

    @router.get(
        "/healthz", summary="Liveness", operation_id="healthz", tags=["health"], responses=probe_errors
    )
    async def healthz() -> dict[str, str]:
        return liveness()

    @router.get(
        "/readyz",
        summary="Readiness: store and key source reachable",
        operation_id="readyz",
        tags=["health"],
        responses={
            **probe_errors,
            503: {
                "description": (
                    "A dependency is not reachable, or the process is stopping; a process serving "
                    "ANVIL_MAX_CONCURRENT_REQUESTS already answers with plain text"
                ),
                "content": {"application/json": {}, "text/plain": {"schema": {"type": "string"}}},
            },
        },
    )
    async def readyz(request: Request) -> JSONResponse:
        draining = bool(getattr(request.app.state, "draining", False))
        return await readiness(runtime_of(request.scope), draining=draining)
