"""The per-caller token bucket: a minute's allowance at once, then the steady rate; 429 beyond."""

from __future__ import annotations

import httpx
import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from app.domain.principal import Principal
from app.http.ratelimit import RateLimit

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def signed_in_as(oid: str | None, app: RateLimit) -> object:
    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        if oid is not None:
            principal = Principal(oid=oid, tid="t", scopes=frozenset(), expires_at=0.0)
            scope = {**scope, "state": {"principal": principal}}
        await app(scope, receive, send)

    return asgi


async def ok(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("ok")(scope, receive, send)


async def test_a_burst_passes_then_the_caller_waits_for_the_refill() -> None:
    clock = Clock()
    limit = RateLimit(ok, per_minute=3, clock=clock)
    alice = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=signed_in_as("alice", limit)), base_url="http://a"
    )
    bob = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=signed_in_as("bob", limit)), base_url="http://a"
    )
    async with alice, bob:
        assert [(await alice.get("/api/x")).status_code for _ in range(3)] == [200, 200, 200]
        refused = await alice.get("/api/x")
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "20"
        assert refused.headers["content-type"] == "application/problem+json"
        assert (
            refused.json()["detail"]
            == "Too many requests from this caller: at most 3 a minute. Retry in 20 s."
        )
        assert (await bob.get("/api/x")).status_code == 200, "each caller has its own bucket"
        assert (await alice.get("/healthz")).status_code == 200, "probes are never limited"
        clock.now += 19
        assert (await alice.get("/api/x")).status_code == 429
        clock.now += 1
        assert (await alice.get("/api/x")).status_code == 200
        assert (await alice.get("/api/x")).status_code == 429


async def test_anonymous_callers_are_counted_by_address() -> None:
    limit = RateLimit(ok, per_minute=1, clock=Clock())
    transport = httpx.ASGITransport(app=signed_in_as(None, limit), client=("10.0.0.1", 1234))
    other = httpx.ASGITransport(app=signed_in_as(None, limit), client=("10.0.0.2", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://a") as one:
        assert (await one.post("/mcp")).status_code == 200
        assert (await one.post("/mcp")).status_code == 429
    async with httpx.AsyncClient(transport=other, base_url="http://a") as two:
        assert (await two.post("/mcp")).status_code == 200
