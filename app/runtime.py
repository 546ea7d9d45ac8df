"""What the surfaces may read of a running Anvil: the services, the caller's verifier, the
readiness probes and the served knowledge.

`app.lifespan` opens the parts and puts one `Runtime` in the ASGI lifespan state, which the
server copies into every request's `scope["state"]`; a surface reads it with `runtime_of`. The
surfaces import this module, never the composition root: what opens the parts stays out of reach
of what serves a request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.domain.ask import AskService
from app.domain.lifecycle import ConversationService
from app.domain.ports import KnowledgeIndex, Verifier
from app.telemetry.instruments import Telemetry


@dataclass
class Runtime:
    """What the surfaces need at request time. `readiness` maps a check name to its probe."""

    service: AskService
    conversations: ConversationService
    #: None when sign-in is off (`ANVIL_AUTH_MODE=none`): every caller is anonymous.
    verifier: Verifier | None
    #: The knowledge index being served; None for an engine that reads none (echo).
    knowledge: KnowledgeIndex | None = None
    #: The RFC 9728 protected-resource document; None when sign-in is off.
    resource_metadata: dict[str, object] | None = None
    readiness: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    #: Records nothing unless an exporter is configured (`app.telemetry.setup`).
    telemetry: Telemetry = field(default_factory=Telemetry.off)


def runtime_of(scope: Mapping[str, Any]) -> Runtime:
    """The runtime the lifespan put in this request's state."""
    state = scope.get("state")
    runtime = state.get("runtime") if isinstance(state, dict) else None
    if not isinstance(runtime, Runtime):
        raise RuntimeError("Anvil has not started: the ASGI server did not run the app's lifespan")
    return runtime
