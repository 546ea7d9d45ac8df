"""What the front door (`app.serve.frontdoor`) knows of the HTTP protocol it wraps: the calls it
passes on, and what it reads of the exchange being answered."""

from __future__ import annotations

from typing import Any, Protocol


class HTTPProtocol(Protocol):
    """What the front door needs of the protocol it wraps (uvicorn's HTTP protocols have it)."""

    def connection_made(self, transport: Any) -> None: ...
    def data_received(self, data: bytes) -> None: ...
    def eof_received(self) -> bool | None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...
    def shutdown(self) -> None: ...


def awaits_continue(inner: HTTPProtocol) -> bool:
    """Whether the request being read waits for `100 Continue`, which the app has not yet asked for."""
    exchange = getattr(inner, "cycle", None)
    return bool(getattr(exchange, "waiting_for_100_continue", False))


def response_started(inner: HTTPProtocol) -> bool:
    """Whether the app has begun to answer the request being read (True when it cannot be told)."""
    exchange = getattr(inner, "cycle", None)
    return bool(getattr(exchange, "response_started", True))
