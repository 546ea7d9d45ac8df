"""The long-lived objects of a running Anvil: opened by the app's lifespan, read per request.

The lifespan yields `{"runtime": Runtime(...)}` as the ASGI lifespan state, which the server
copies into every request's `scope["state"]`; the surfaces read it from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.domain.ask import AskService
from app.domain.lifecycle import ConversationService
from app.domain.ports import Verifier
from app.settings import Settings
from app.telemetry.setup import Telemetry


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
    #: None unless an exporter is configured (`app.telemetry.setup`).
    telemetry: Telemetry | None = None
    #: How many documents the answer engine's corpus holds; None when it reads none (echo).
    corpus_documents: int | None = None


def runtime_of(scope: Mapping[str, Any]) -> Runtime:
    """The runtime the lifespan put in this request's state."""
    state = scope.get("state")
    runtime = state.get("runtime") if isinstance(state, dict) else None
    if not isinstance(runtime, Runtime):
        raise RuntimeError("Anvil has not started: the ASGI server did not run the app's lifespan")
    return runtime
