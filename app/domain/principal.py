"""Who is calling: the identity a verified access token proves."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """A signed-in caller, identified by Entra object id (`oid`) and tenant id (`tid`).

    Only `oid` and `tid` identify a user; `name` is for display and logs and is never used to
    authorise anything.
    """

    oid: str
    tid: str
    scopes: frozenset[str]
    expires_at: float
    name: str | None = None
