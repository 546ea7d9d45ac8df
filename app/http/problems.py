"""Every error the HTTP surface writes is a problem document (RFC 9457), whatever raised it.

`problem_response` renders one (`error_response` for an `AnvilError`); its `title` is the
status's reason phrase as the standard library spells it, the same for every problem of a status.
`AnvilError`s carry their own status and message; the framework's 404 and 405 (with `Allow`)
and a request it could not validate are rendered the same way; anything unexpected becomes a
500 that names a correlation id, also logged with the traceback, and says nothing internal.
`install_problem_handlers` must run after every other middleware is added.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from http import HTTPStatus

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import AnvilError

logger = logging.getLogger(__name__)

PROBLEM_TYPE_BASE = "https://anvil.dev/problems/"


def problem_document(status: int, detail: str, kind: str | None = None) -> dict[str, object]:
    """The RFC 9457 body: `type`, `title`, `status`, `detail` (which must be safe to show)."""
    return {
        "type": PROBLEM_TYPE_BASE + (kind or str(status)),
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
    }


def problem_response(
    status: int, detail: str, *, kind: str | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    """An `application/problem+json` response; `detail` must be safe to show (no secrets)."""
    return Response(
        json.dumps(problem_document(status, detail, kind)),
        status_code=status,
        media_type="application/problem+json",
        headers=dict(headers or {}),
    )


def error_response(error: AnvilError, headers: Mapping[str, str] | None = None) -> Response:
    """The problem response for `error`, with its own headers and any `headers` given."""
    return problem_response(
        error.status, error.message, kind=error.kind, headers={**error.headers(), **(headers or {})}
    )


_HTTP_DETAILS = {
    404: "Nothing is served at this path: see /openapi.json for Anvil's routes (MCP is POST /mcp).",
    405: "This method is not allowed here; the Allow header lists the ones that are.",
}


async def anvil_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, AnvilError)
    return error_response(error)


async def http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    detail = _HTTP_DETAILS.get(error.status_code, str(error.detail))
    headers = dict(error.headers or {})
    if error.status_code == 405:
        # The router names the methods of the first route on this path only; a path served by
        # several routes (GET, POST and DELETE /api/conversations) allows all of theirs.
        headers["Allow"] = ", ".join(sorted(allowed_methods(request)))
    return problem_response(error.status_code, detail, headers=headers)


def allowed_methods(request: Request) -> set[str]:
    """Every method some route serves at this request's path."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods and route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods
    return methods


async def validation_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    fields = ", ".join(".".join(str(part) for part in item["loc"]) for item in error.errors())
    return problem_response(
        400, f"Invalid arguments: {fields}. Fix them and call again.", kind="invalid-input"
    )


class UnexpectedErrors:
    """Outermost ASGI middleware: an exception nothing else handled is logged once, with a
    correlation id, and answered 500 with that id (if no response has started yet)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as error:
            correlation = uuid.uuid4().hex
            logger.error("unexpected error, correlation id %s", correlation, exc_info=error)
            if started:
                raise  # the server can only drop the connection now
            await problem_response(
                500,
                "Anvil failed unexpectedly. Retry; if it persists, give the operator this correlation id: "
                f"{correlation}.",
                kind="internal",
                headers={"X-Correlation-Id": correlation},
            )(scope, receive, send)


def install_problem_handlers(api: FastAPI) -> None:
    """Render every error of `api` as a problem document."""
    api.add_exception_handler(AnvilError, anvil_error)
    api.add_exception_handler(HTTPException, http_error)
    api.add_exception_handler(RequestValidationError, validation_error)
    # Added last, so it wraps every other middleware (guard and sign-in included).
    api.add_middleware(UnexpectedErrors)
