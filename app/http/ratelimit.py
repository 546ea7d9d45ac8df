"""An optional per-user request rate, per process (`ANVIL_RATE_LIMIT_PER_MINUTE`).

A token bucket per caller: a signed-in user by tenant and object id, an anonymous caller by its
address. It holds `per_minute` requests and refills at `per_minute / 60` a second, so a burst of
a minute's allowance is served at once and the rest at the steady rate. A request beyond it gets
429 with `Retry-After` (seconds until the next request would pass), before its body is read.
Every replica counts on its own: the gateway in front enforces a rate across replicas.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from app.http.problems import problem_response
from app.http.signin import PROTECTED_PREFIXES, principal_of

#: Callers remembered at once; the least recently seen are forgotten first (a forgotten caller
#: starts again with a full bucket, which only ever errs towards serving).
MAX_CALLERS = 100_000


class RateLimit:
    """ASGI middleware: refuses a caller's requests beyond `per_minute`, with 429."""

    def __init__(self, app: ASGIApp, *, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.capacity = float(per_minute)
        self.refill = per_minute / 60.0
        self._clock = clock
        #: caller -> (tokens left, when they were counted)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIXES):
            await self.app(scope, receive, send)
            return
        wait = self._take(_caller(scope))
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            await problem_response(
                429,
                f"Too many requests from this caller: at most {self.capacity:g} a minute. "
                f"Retry in {seconds} s.",
                kind="rate-limited",
                headers={"Retry-After": str(seconds)},
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _take(self, caller: str) -> float:
        """Take one request from `caller`'s bucket: 0 if it passes, else the seconds to wait."""
        now = self._clock()
        tokens, then = self._buckets.pop(caller, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - then) * self.refill)
        passes = tokens >= 1.0
        self._buckets[caller] = (tokens - 1.0 if passes else tokens, now)
        if len(self._buckets) > MAX_CALLERS:
            self._buckets.popitem(last=False)
        return 0.0 if passes else (1.0 - tokens) / self.refill


def _caller(scope: Scope) -> str:
    principal = principal_of(scope)
    if principal is not None:
        return f"user:{principal.tid}:{principal.oid}"
    client = scope.get("client")
    return f"address:{client[0] if client else 'unknown'}"
