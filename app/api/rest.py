"""The REST surface for API Management and curl: the same service and envelope as MCP."""

# No `from __future__ import annotations`: FastAPI reads the route annotations at runtime.

import math
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.responses import JSONResponse, Response

from app.api.health import liveness, readiness
from app.api.schemas import (
    AskBody,
    AskOutput,
    ConversationOutput,
    DeleteAllOutput,
    DeleteOutput,
    ListOutput,
    StartBody,
    StartOutput,
)
from app.api.signin import principal_of
from app.domain.ask import AskRequest
from app.domain.principal import Principal
from app.errors import (
    AnvilError,
    Conflict,
    InvalidInput,
    NotFound,
    SignInRequired,
    Unavailable,
    problem_response,
)
from app.runtime import Runtime, RuntimeRef

# SignInRequired only happens when sign-in is off (anonymous callers), where no bearer challenge
# could help: 403 rather than a 401 without WWW-Authenticate.
STATUS = {InvalidInput: 400, SignInRequired: 403, NotFound: 404, Conflict: 409, Unavailable: 503}

PROBLEM: dict[str, Any] = {
    "description": "Problem document (RFC 9457)",
    "content": {"application/problem+json": {}},
}


def error_response(error: AnvilError) -> Response:
    """Map an `AnvilError` to its status and problem document."""
    status = next((code for kind, code in STATUS.items() if isinstance(error, kind)), 500)
    headers = {}
    if isinstance(error, Unavailable) and error.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    return problem_response(status, error.message, kind=error.kind, headers=headers)


def build_router(runtime_ref: RuntimeRef) -> APIRouter:
    """Routes under `/api`, plus the health probes."""

    def runtime() -> Runtime:
        return runtime_ref.get()

    def caller(request: Request) -> Principal | None:
        return principal_of(request.scope)

    RuntimeDep = Annotated[Runtime, Depends(runtime)]
    CallerDep = Annotated[Principal | None, Depends(caller)]
    router = APIRouter()

    @router.post(
        "/api/ask",
        response_model=AskOutput,
        summary="Ask a question",
        description=(
            "Same rules as the MCP `ask` tool: history is kept only for a signed-in caller who passes "
            "a conversationId."
        ),
        operation_id="ask",
        responses={400: PROBLEM, 401: PROBLEM, 409: PROBLEM, 413: PROBLEM, 503: PROBLEM},
        tags=["ask"],
    )
    async def ask(body: AskBody, rt: RuntimeDep, principal: CallerDep) -> AskOutput:
        request = AskRequest(body.question, body.conversationId, body.instructions, body.clientRequestId)
        return AskOutput.of(await rt.service.ask(principal, request))

    conversation_errors: dict[int | str, dict[str, Any]] = {
        400: PROBLEM,
        401: PROBLEM,
        403: PROBLEM,
        503: PROBLEM,
    }

    @router.post(
        "/api/conversations",
        response_model=StartOutput,
        status_code=201,
        summary="Start a conversation with a server-minted id",
        operation_id="startConversation",
        responses={**conversation_errors, 409: PROBLEM},
        tags=["conversations"],
    )
    async def start_conversation(
        rt: RuntimeDep, principal: CallerDep, body: StartBody | None = None
    ) -> StartOutput:
        body = body or StartBody()
        started = await rt.conversations.start(principal, instructions=body.instructions, title=body.title)
        return StartOutput.of(started)

    @router.get(
        "/api/conversations",
        response_model=ListOutput,
        summary="List your conversations, newest first",
        operation_id="listConversations",
        responses=conversation_errors,
        tags=["conversations"],
    )
    async def list_conversations(
        rt: RuntimeDep,
        principal: CallerDep,
        limit: Annotated[int, Query(description="Conversations per page (1-100).")] = 20,
        cursor: Annotated[str | None, Query(description="nextCursor of the previous page.")] = None,
    ) -> ListOutput:
        return ListOutput.of(await rt.conversations.list(principal, limit=limit, cursor=cursor))

    @router.delete(
        "/api/conversations",
        response_model=DeleteAllOutput,
        summary="Delete all of your conversations",
        operation_id="deleteAllConversations",
        responses=conversation_errors,
        tags=["conversations"],
    )
    async def delete_all_conversations(rt: RuntimeDep, principal: CallerDep) -> DeleteAllOutput:
        return DeleteAllOutput(deleted=await rt.conversations.delete_all(principal))

    @router.get(
        "/api/conversations/{conversationId}",
        response_model=ConversationOutput,
        summary="Read back one conversation, newest turn last",
        operation_id="getConversation",
        responses={**conversation_errors, 404: PROBLEM},
        tags=["conversations"],
    )
    async def get_conversation(
        conversationId: str,
        rt: RuntimeDep,
        principal: CallerDep,
        limit: Annotated[int | None, Query(description="Only the latest N turns (1-1000).")] = None,
    ) -> ConversationOutput:
        conversation, turns = await rt.conversations.get(principal, conversationId, limit=limit)
        return ConversationOutput.of(conversation, turns)

    @router.delete(
        "/api/conversations/{conversationId}",
        response_model=DeleteOutput,
        summary="Delete one conversation (idempotent)",
        operation_id="deleteConversation",
        responses=conversation_errors,
        tags=["conversations"],
    )
    async def delete_conversation(conversationId: str, rt: RuntimeDep, principal: CallerDep) -> DeleteOutput:
        return DeleteOutput(deleted=await rt.conversations.delete(principal, conversationId))

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
    async def readyz(rt: RuntimeDep) -> JSONResponse:
        return await readiness(rt)

    return router


def install_error_handlers(api: FastAPI) -> None:
    """Every REST error is a problem document that says what to change."""

    async def anvil_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, AnvilError)
        return error_response(error)

    async def validation_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        details = []
        for item in error.errors():
            where = ".".join(str(p) for p in item["loc"] if p != "body") or "body"
            details.append(f"{where}: {item['msg']}")
        return problem_response(400, "Invalid request: " + "; ".join(details) + ".", kind="invalid-input")

    api.add_exception_handler(AnvilError, anvil_error)
    api.add_exception_handler(RequestValidationError, validation_error)
