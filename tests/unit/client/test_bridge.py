"""The bridge's bearer tokens: one renewal for many refused requests, renewal before expiry."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio
import httpx2
import jwt
import pytest

from app.client.bridge import RENEW_BEFORE_SECONDS, BearerAuth, HttpFailure
from app.client.tokens import TokenSource

pytestmark = pytest.mark.anyio


class Tokens:
    """A token source handing out `t1`, `t2`, ... as JWTs expiring at `expires`, counting calls."""

    def __init__(self, expires: float = 2_000_000_000.0) -> None:
        self.issued = 0
        self.refreshes = 0
        self.expires = expires
        self._lock = threading.Lock()

    def get(self, refresh: bool) -> str:
        with self._lock:
            self.issued += 1
            self.refreshes += refresh
            return jwt.encode({"sub": f"t{self.issued}", "exp": self.expires}, "k" * 32, algorithm="HS256")


def subject(authorization: str) -> str:
    token = authorization.removeprefix("Bearer ")
    return str(jwt.decode(token, options={"verify_signature": False})["sub"])


def server(accepts: Callable[[str], bool]) -> tuple[httpx2.MockTransport, list[str]]:
    """A server accepting the tokens `accepts` approves, else 401 with a problem document."""
    seen: list[str] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        token = subject(request.headers["Authorization"])
        seen.append(token)
        if accepts(token):
            return httpx2.Response(200, json={"ok": token})
        return httpx2.Response(
            401,
            headers={"content-type": "application/problem+json"},
            json={"title": "Unauthorized", "detail": "The access token has expired."},
        )

    return httpx2.MockTransport(handle), seen


async def test_concurrent_requests_refused_with_one_token_renew_it_once() -> None:
    tokens = Tokens()
    transport, seen = server(lambda token: token != "t1")
    auth = BearerAuth(TokenSource(tokens.get, renewable=True))
    async with httpx2.AsyncClient(transport=transport, auth=auth) as http:
        responses: list[httpx2.Response] = []

        async def one() -> None:
            responses.append(await http.get("http://anvil.test/mcp"))

        async with anyio.create_task_group() as group:
            for _ in range(8):
                group.start_soon(one)
    assert [r.status_code for r in responses] == [200] * 8
    assert tokens.refreshes == 1 and auth.renewals == 1
    assert sorted(seen) == ["t1"] * 8 + ["t2"] * 8


async def test_a_fixed_token_is_not_renewed_and_the_refusal_is_remembered() -> None:
    transport, seen = server(lambda token: False)
    fixed = jwt.encode({"sub": "given", "exp": 2_000_000_000}, "k" * 32, algorithm="HS256")
    auth = BearerAuth(TokenSource.fixed(fixed))
    async with httpx2.AsyncClient(transport=transport, auth=auth) as http:
        response = await http.get("http://anvil.test/mcp")
    assert response.status_code == 401 and seen == ["given"]
    assert auth.last_failure == HttpFailure(401, "The access token has expired", None)
    assert auth.last_failure.describe("https://h/mcp", "run `anvil login`") == (
        "https://h/mcp refused sign-in (HTTP 401): The access token has expired (run `anvil login`)"
    )


async def test_a_token_close_to_expiry_is_renewed_before_it_is_sent() -> None:
    now = 1_000_000.0
    tokens = Tokens(expires=now + RENEW_BEFORE_SECONDS + 60)
    transport, seen = server(lambda token: True)
    auth = BearerAuth(TokenSource(tokens.get, renewable=True), clock=lambda: now)
    async with httpx2.AsyncClient(transport=transport, auth=auth) as http:
        await http.get("http://anvil.test/a")
        await http.get("http://anvil.test/b")
        now += 61  # now within the renewal margin
        await http.get("http://anvil.test/c")
    assert seen == ["t1", "t1", "t2"]
    assert tokens.refreshes == 0, "renewing ahead of expiry is a silent get, not a refresh after refusal"
