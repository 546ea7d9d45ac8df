"""Who decodes JSON during a request: decoders wrapped to record the module of each caller."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest


def record_callers(monkeypatch: pytest.MonkeyPatch, *decoders: tuple[object, str]) -> list[str]:
    """Wrap each decoder, given as its owner and name (`(json, "loads")`), for the rest of the
    test; the returned list gets the module name of every caller, in call order. Catches calls
    made through the attribute (`json.loads(...)`), not through a name imported from it."""
    callers: list[str] = []

    def recording(decode: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            frame = inspect.currentframe()
            caller = frame.f_back if frame is not None else None
            callers.append(str(caller.f_globals.get("__name__", "?")) if caller is not None else "?")
            return decode(*args, **kwargs)

        return recorded

    for owner, name in decoders:
        monkeypatch.setattr(owner, name, recording(getattr(owner, name)))
    return callers


def of_anvil(callers: list[str]) -> list[str]:
    """The callers that are Anvil's own modules."""
    return [module for module in callers if module.split(".")[0] == "app"]
