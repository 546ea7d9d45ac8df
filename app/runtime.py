"""The long-lived objects of a running Anvil, opened in the app lifespan and shared by surfaces."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.domain.ask import AskService
from app.domain.lifecycle import ConversationService
from app.ports import Verifier
from app.settings import Settings


@dataclass
class Runtime:
    """What the surfaces need at request time. `readiness` maps a check name to its probe."""

    settings: Settings
    service: AskService
    conversations: ConversationService
    #: None when sign-in is off (`ANVIL_AUTH_MODE=none`): every caller is anonymous.
    verifier: Verifier | None
    #: The RFC 9728 protected-resource document; None when sign-in is off.
    resource_metadata: dict[str, object] | None = None
    readiness: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)


class RuntimeRef:
    """Filled in by the lifespan; surfaces are built before it runs and read it per request."""

    def __init__(self) -> None:
        self._runtime: Runtime | None = None

    def set(self, runtime: Runtime | None) -> None:
        self._runtime = runtime

    def get(self) -> Runtime:
        if self._runtime is None:
            raise RuntimeError("Anvil has not started (the app lifespan did not run)")
        return self._runtime
