"""Every error the HTTP surface writes is a problem document (RFC 9457), whatever raised it.

`AnvilError`s carry their own status and message; the framework's 404 and 405 (with `Allow`)
and a request it could not validate are rendered the same way; anything unexpected becomes a
500 that names a correlation id, also logged with the traceback, and says nothing internal.
"""

from __future__ import annotations

import logging
import uuid

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from app.errors import AnvilError, error_response, problem_response

logger = logging.getLogger(__name__)

_HTTP_DETAILS = {
    404: "Nothing is served at this path: see /openapi.json for Anvil's routes (MCP is POST /mcp).",
    405: "This method is not allowed here; the Allow header lists the ones that are.",
}


async def anvil_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, AnvilError)
    return error_response(error)


async def http_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    detail = _HTTP_DETAILS.get(error.status_code, str(error.detail))
    return problem_response(error.status_code, detail, headers=error.headers)


async def validation_error(_: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    fields = ", ".join(".".join(str(part) for part in item["loc"]) for item in error.errors())
    return problem_response(400, f"Invalid request: check {fields}.", kind="invalid-input")


async def unexpected_error(_: Request, error: Exception) -> Response:
    correlation = uuid.uuid4().hex
    logger.error("unexpected error, correlation id %s", correlation, exc_info=error)
    return problem_response(
        500,
        f"Anvil failed unexpectedly. Retry; if it persists, give the operator this correlation id: "
        f"{correlation}.",
        kind="internal",
        headers={"X-Correlation-Id": correlation},
    )


def install_problem_handlers(api: FastAPI) -> None:
    """Render every error of `api` as a problem document."""
    api.add_exception_handler(AnvilError, anvil_error)
    api.add_exception_handler(HTTPException, http_error)
    api.add_exception_handler(RequestValidationError, validation_error)
    # Starlette runs the handler for `Exception` in its outermost middleware, so it also covers
    # errors raised by the guard and sign-in layers.
    api.add_exception_handler(Exception, unexpected_error)
