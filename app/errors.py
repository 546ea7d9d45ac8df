"""The one error model: every error Anvil reports carries its kind, HTTP status and message.

Messages are written for the caller (often an agent): each says what went wrong and what to do
next, and never contains a token or another secret. Each surface renders them once:
`app.http.problems.error_response` for HTTP (RFC 9457 `application/problem+json`), and the MCP
surface's `tool_error` for a tool result with `isError: true`. Nothing here knows a web framework,
so the domain can raise these without reaching one.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Iterable, Mapping
from typing import Literal


class AnvilError(Exception):
    """Base of every error Anvil reports to a caller."""

    #: Short machine-readable kind: the suffix of the problem `type` on HTTP.
    kind = "error"
    #: HTTP status of the problem document.
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[str, str]:
        """Extra HTTP headers the problem response carries."""
        return {}


class InvalidInput(AnvilError):
    """The caller sent something that cannot be accepted as it is."""

    kind = "invalid-input"
    status = 400


class SignInRequired(AnvilError):
    """The operation needs a signed-in user and the caller is anonymous.

    Only happens when sign-in is off (`ANVIL_AUTH_MODE=none`), where no bearer challenge could
    help: 403 rather than a 401 without `WWW-Authenticate`.
    """

    kind = "sign-in-required"
    status = 403


class NotFound(AnvilError):
    """The thing asked for does not exist (or belongs to someone else, which looks the same)."""

    kind = "not-found"
    status = 404


class Conflict(AnvilError):
    """The request contradicts what is already stored."""

    kind = "conflict"
    status = 409


class QuotaExceeded(Conflict):
    """The user already keeps as many conversations as one user may."""

    kind = "quota-exceeded"


class Unavailable(AnvilError):
    """A dependency is busy or down; the same request may succeed later."""

    kind = "unavailable"
    status = 503

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        # No hint means nobody knows when it will work again (refused credentials, say).
        return {} if self.retry_after is None else {"Retry-After": retry_after_header(self.retry_after)}


class StoreFailed(Unavailable):
    """The conversation store failed in a way that is not a passing rush: a full disk, a file it
    may not write, refused credentials, no answer in time. The caller is told to retry later; the
    operator must act, so the error names its `cause` (for logs and metrics, a short word) and
    what to do about it (`remedy`, never shown to the caller)."""

    def __init__(self, message: str, *, cause: str, remedy: str, retry_after: float | None = 30.0) -> None:
        super().__init__(message, retry_after=retry_after)
        self.cause = cause
        self.remedy = remedy


class EngineFailed(AnvilError):
    """The answer engine (a language model) failed or timed out; asking again may work."""

    kind = "engine-failed"
    status = 502


AuthErrorCode = Literal["invalid_token", "insufficient_scope"]


class AuthError(AnvilError):
    """A bearer token was missing, invalid, or lacked a scope the operation needs (RFC 6750).

    The sign-in middleware adds the `WWW-Authenticate` challenge. Descriptions are fixed
    sentences: they never quote the token or a claim taken from it, so they are safe to return
    and to log.
    """

    def __init__(
        self,
        status: Literal[401, 403],
        error: AuthErrorCode,
        description: str,
        scope: str | None = None,
    ) -> None:
        super().__init__(description)
        self.status = status
        self.kind = error.replace("_", "-")
        self.error = error
        self.description = description
        #: For 403 only: the scopes the operation needs, space-separated as in RFC 6750.
        self.scope = scope

    @classmethod
    def invalid(cls, description: str) -> AuthError:
        """A 401 `invalid_token`: the token cannot be trusted (bad, expired, foreign, ...)."""
        return cls(401, "invalid_token", description)

    @classmethod
    def insufficient_scope(cls, scopes: Iterable[str]) -> AuthError:
        """A 403 `insufficient_scope`: the token is genuine but was not granted `scopes`."""
        # A bare string would otherwise be iterated character by character.
        names = scopes.split() if isinstance(scopes, str) else list(scopes)
        scope = " ".join(names)
        return cls(
            403, "insufficient_scope", f"The access token lacks a required scope ({scope}).", scope=scope
        )

    def __repr__(self) -> str:
        return f"AuthError({self.status}, {self.error!r}, {self.description!r})"


def busy(what: str, headers: Mapping[str, str], default: float) -> Unavailable:
    """`Unavailable`: `what` ("The language model") is busy, with the wait its response asked for
    (`retry_after_seconds`; a wait of 0 is kept), else `default` seconds."""
    wait = retry_after_seconds(headers)
    if wait is None:
        wait = default
    seconds = math.ceil(wait)
    when = f"retry in {seconds} s" if seconds else "retry now"
    return Unavailable(f"{what} is busy; {when}.", retry_after=wait)


def retry_after_seconds(
    headers: Mapping[str, str], milliseconds: tuple[str, ...] = ("retry-after-ms",)
) -> float | None:
    """The wait a response asks for: a `milliseconds` header (`retry-after-ms`, Cosmos DB's
    `x-ms-retry-after-ms`) first, else `Retry-After` as seconds or an HTTP date; None when none
    is given or readable. Header names are matched case-insensitively, whatever `headers` is."""
    named = {key.lower(): value for key, value in headers.items()}
    for name in milliseconds:
        try:
            return max(0.0, float(named[name]) / 1000)
        except (KeyError, ValueError):
            continue
    value = named.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_after_header(seconds: float | None) -> str:
    """The `Retry-After` value for a wait of `seconds`: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds or 1)))
