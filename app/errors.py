"""The small error hierarchy every layer raises and every surface maps once.

Messages are written for the caller (often an agent): each says what went wrong and what to do
next. They never contain tokens or other secrets.
"""

from __future__ import annotations


class AnvilError(Exception):
    """Base of every error Anvil reports to a caller."""

    #: Short machine-readable kind, used as the problem type suffix on REST.
    kind = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(AnvilError):
    """The caller sent something that cannot be accepted as it is."""

    kind = "invalid-input"


class NotFound(AnvilError):
    """The thing asked for does not exist (or belongs to someone else, which looks the same)."""

    kind = "not-found"


class Conflict(AnvilError):
    """The request contradicts what is already stored."""

    kind = "conflict"


class Unavailable(AnvilError):
    """A dependency is busy or down; the same request may succeed later."""

    kind = "unavailable"

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SignInRequired(AnvilError):
    """The operation needs a signed-in user and the caller is anonymous."""

    kind = "sign-in-required"
