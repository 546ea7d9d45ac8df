"""What an opened sign-in mode is: its verifier, what clients are told to sign in with (the RFC 9728
document), and its lifecycle hooks. Each mode's opener (`setup`, `entra`) returns one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.domain.ports import Verifier


@dataclass(frozen=True, slots=True)
class AuthSetup:
    """The verifier (None when anonymous), what clients are told to sign in with, and lifecycle hooks.

    `readiness` raises when the key source cannot serve (reported by `/readyz`); `aclose`
    releases what the mode opened (HTTP clients).
    """

    verifier: Verifier | None
    authorization_servers: tuple[str, ...] = ()
    scopes_supported: tuple[str, ...] = ()
    readiness: Callable[[], Awaitable[None]] | None = None
    aclose: Callable[[], Awaitable[None]] | None = None


def protected_resource_metadata(resource_url: str, setup: AuthSetup) -> dict[str, object]:
    """The RFC 9728 document for the MCP endpoint at `resource_url`."""
    return {
        "resource": resource_url,
        "authorization_servers": list(setup.authorization_servers),
        "scopes_supported": list(setup.scopes_supported),
        "bearer_methods_supported": ["header"],
        "resource_name": "Anvil",
    }
