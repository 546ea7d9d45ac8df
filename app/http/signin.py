"""Bearer sign-in in front of the protected routes (`/mcp`, `/api/...`).

A request without a token gets 401 with `WWW-Authenticate: Bearer resource_metadata="..."` and
no error code (RFC 6750 section 3.1), which is what lets VS Code start sign-in; a bad token gets
`error="invalid_token"`; a token without the required scope gets 403 `insufficient_scope`.
Tokens are read from the Authorization header only, and no token text ever reaches a response
or a log line. The verified caller is left in `scope["state"]["principal"]` for the routes.
"""

from __future__ import annotations

import logging

from opentelemetry.trace import Status, StatusCode
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.domain.ports import Verifier
from app.domain.principal import Principal
from app.errors import AuthError, InvalidInput, Unavailable
from app.http.problems import error_response, problem_response
from app.http.received import head_of
from app.runtime import runtime_of
from app.telemetry.instruments import Telemetry
from app.telemetry.spans import CurrentSpan

logger = logging.getLogger(__name__)

PROTECTED_PREFIXES = ("/mcp", "/api/")


def principal_of(scope: Scope) -> Principal | None:
    """The caller this request was verified as, or None for an anonymous caller."""
    state = scope.get("state")
    principal = state.get("principal") if isinstance(state, dict) else None
    return principal if isinstance(principal, Principal) else None


class BearerAuthMiddleware:
    """Verifies the bearer token of protected requests; a runtime without a verifier is anonymous."""

    def __init__(self, app: ASGIApp, *, resource_metadata_url: str) -> None:
        self.app = app
        self.resource_metadata_url = resource_metadata_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIXES):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        credentials = head_of(scope).authorization
        if len(credentials) > 1:
            # A proxy that reads another of them would disagree with Anvil about who is calling.
            refusal = InvalidInput(
                f"The request carries {len(credentials)} Authorization headers: send exactly one."
            )
            await error_response(refusal)(scope, receive, send)
            return
        runtime = runtime_of(scope)
        verifier = runtime.verifier
        if verifier is None:
            state["principal"] = None
            await self.app(scope, receive, send)
            return
        authorization = credentials[0] if credentials else None
        telemetry = runtime.telemetry
        try:
            state["principal"] = await self._traced_verify(authorization, verifier, telemetry)
        except AuthError as error:
            reason = error.error if authorization is not None else "missing_token"
            telemetry.instruments.sign_in_failures.add(1, {"error.type": reason})
            await self._refuse(error, token_sent=authorization is not None)(scope, receive, send)
            return
        except Unavailable as error:
            await error_response(error)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _verify(self, authorization: str | None, verifier: Verifier) -> Principal:
        if authorization is None:
            raise AuthError.invalid(
                "Sign-in required: send an access token as 'Authorization: Bearer <token>'."
            )
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer":
            raise AuthError.invalid("Only the Bearer scheme is accepted: 'Authorization: Bearer <token>'.")
        if not token:
            raise AuthError.invalid("The Authorization header carries an empty bearer token.")
        return await verifier.verify(token)

    async def _traced_verify(
        self, authorization: str | None, verifier: Verifier, telemetry: Telemetry
    ) -> Principal:
        """`_verify` in a span that records the outcome and the caller's pseudonym, never the token."""
        with CurrentSpan(telemetry.tracer, "sign_in") as span:
            try:
                principal = await self._verify(authorization, verifier)
            except AuthError as error:
                reason = error.error if authorization is not None else "missing_token"
                span.set_attribute("anvil.sign_in.outcome", "refused")
                span.set_attribute("error.type", reason)
                span.set_status(Status(StatusCode.ERROR, reason))
                raise
            if span.is_recording():
                # The keyed hash is most of what this span costs when nothing records it.
                span.set_attribute("anvil.sign_in.outcome", "signed_in")
                span.set_attribute("anvil.user", telemetry.pseudonym(principal.oid))
            return principal

    def _refuse(self, error: AuthError, *, token_sent: bool) -> Response:
        params = [f'resource_metadata="{self.resource_metadata_url}"']
        if token_sent:
            params.append(f'error="{error.error}"')
            params.append(f'error_description="{_quote(error.description)}"')
            if error.scope:
                params.append(f'scope="{error.scope}"')
        if token_sent:
            logger.info("refused a request whose token did not sign in: %s", error.error)
        else:
            logger.info("refused a request with no token: sign-in required")
        return problem_response(
            error.status,
            error.description,
            kind=error.error.replace("_", "-") if token_sent else "sign-in-required",
            headers={"WWW-Authenticate": "Bearer " + ", ".join(params)},
        )


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', "'")
