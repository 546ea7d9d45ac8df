"""The RFC 9728 protected-resource metadata, where a client that got a 401 learns how to sign in.

`WWW-Authenticate` on a 401 names `WELL_KNOWN + "/mcp"` (the resource `/mcp` is); the bare
`WELL_KNOWN` serves the same document for clients that look there first. With sign-in off there
is nothing to sign in to, and both answer 404.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.http.problems import problem_response
from app.runtime import runtime_of

WELL_KNOWN = "/.well-known/oauth-protected-resource"


async def resource_metadata(request: Request) -> Response:
    document = runtime_of(request.scope).resource_metadata
    if document is None:
        return problem_response(404, "Sign-in is off on this server (ANVIL_AUTH_MODE=none).")
    return JSONResponse(document, headers={"Cache-Control": "public, max-age=3600"})


def add_well_known_routes(router: FastAPI) -> None:
    """Serve the metadata at both paths, outside the OpenAPI document: they describe sign-in to
    the API rather than being part of it (the gateway's deployment adds them itself)."""
    for path in (WELL_KNOWN, WELL_KNOWN + "/mcp"):
        router.add_api_route(path, resource_metadata, methods=["GET"], include_in_schema=False)
