"""One server span, one duration and one access log line per HTTP request.

The route is the template the request matched (`/api/conversations/{conversationId}`, never the
id itself), so spans, metrics and log lines stay low-cardinality and carry no conversation id.
Nothing of a header or a body is recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import propagate
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.telemetry.instruments import Telemetry
from app.telemetry.spans import CurrentSpan

access_logger = logging.getLogger("anvil.access")

#: Methods recorded as sent; any other is recorded as `_OTHER` (OpenTelemetry's convention), so
#: nothing a client chose reaches a log line or a metric.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})


def route_of(scope: Scope, routes: Sequence[BaseRoute] = ()) -> str:
    """The route template of the request: the one the router matched, else the first of `routes`
    whose path matches (a request refused before routing, at sign-in say), or `other`."""
    route = scope.get("route")
    if route is None:
        route = next((r for r in routes if r.matches(scope)[0] is not Match.NONE), None)
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    return template if isinstance(template, str) else "other"


class RequestTelemetry:
    """ASGI middleware: the server span (HTTP semantic conventions), `http.server.request.duration`,
    and an access log line (`anvil.access`: method, route, status, duration) when `access_log`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        telemetry: Telemetry,
        access_log: bool,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.app = app
        self.telemetry = telemetry
        self.access_log = access_log
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the server answers if the app never starts a response

        async def recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        method = scope["method"] if scope["method"] in KNOWN_METHODS else "_OTHER"
        # A caller's W3C `traceparent` (API Management sends one) makes this span its child.
        carrier = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        with CurrentSpan(
            self.telemetry.tracer,
            method,
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.scheme": scope.get("scheme", "http")},
        ) as span:
            try:
                await self.app(scope, receive, recording)
            finally:
                route = route_of(scope, self.routes)
                span.update_name(f"{method} {route}")
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                attributes: dict[str, Any] = {
                    "http.request.method": method,
                    "http.route": route,
                    "http.response.status_code": status,
                }
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR, str(status)))
                    span.set_attribute("error.type", str(status))
                    attributes["error.type"] = str(status)
                duration = time.perf_counter() - started
                self.telemetry.instruments.requests.record(duration, attributes)
                if self.access_log:
                    self._log(method, route, status, duration)

    def _log(self, method: str, route: str, status: int, duration: float) -> None:
        """The access log line, written inside the server span so it carries its trace."""
        access_logger.info(
            "%s %s %d %.1fms",
            method,
            route,
            status,
            duration * 1000,
            extra={
                "http.request.method": method,
                "http.route": route,
                "http.response.status_code": status,
                "duration_ms": round(duration * 1000, 3),
                # Method, route template and numbers only: the token redaction can skip it.
                "_clean": True,
            },
        )
