"""The front door: each request's line and headers must arrive in time and within a size limit,
before the app (and so sign-in) sees anything of the request; then its body must arrive in time.

uvicorn cannot do this through its options: its keep-alive timer runs only once a response is
complete and any byte stops it, so a client that sends nothing, or a byte a second, keeps its
connection for ever; its httptools protocol buffers a header of any size; and
`limit_concurrency` counts open connections, so sockets that never finish a request are enough
to make every signed-in request 503.

`front_door(limits)` builds the `asyncio.Protocol` class for `uvicorn.Config(http=...)`. Each
connection's protocol wraps uvicorn's default one (`HttpToolsProtocol`), hands it the bytes
unchanged, and runs a second httptools parser over the same bytes with only the callbacks that
mark where a request begins, where its head ends and where it ends: both are llhttp fed the same
bytes, so they agree on every boundary (keep-alive, pipelining, chunked bodies, upgrades, errors,
which the wrapped protocol answers with its own 400). With that the front door:

- answers 408 and closes when a head is not complete `header_timeout` seconds after the
  connection opened (the first request) or after its first byte (each later one); between
  requests, uvicorn's keep-alive timeout applies. Blank lines between requests, which the parser
  skips anyway, are not passed on, so they cannot keep stopping that timer;
- answers 431 and closes as soon as a head reaches `max_header_bytes` unfinished (a head that
  starts partway through a read, after a pipelined request, is counted from the next read on);
- holds a body that does not come whole with its head to `body_timeout` seconds from the end of
  the head (below);
- connects the wrapped protocol only once the first head is complete: until then the connection
  does not count against `limit_concurrency`, so idle and slow sockets cannot use up the budget
  of signed-in requests (between later requests it counts, for at most the keep-alive timeout
  and then the header deadline).

A refusal is a problem document like every other error, sent with `Connection: close`; the
connection then stops sending, reads and discards for `LINGER_SECONDS` so the answer is not lost
to a reset, and closes, cutting off a pipelined request still being answered.

The body deadline lives here because the app cannot keep it whole: the first `receive()` of a
body that never comes waits for ever, and a timer around every request in the app costs more than
the rest of its checks. Here a timer is armed only when a head is complete and its message is not
by the end of the same read (a body sent with its head costs nothing). When it fires: if uvicorn
has stopped reading (the server holds the body up, not the client), it is armed again; if no
response has started, the answer is 408 and the app's `receive()` reports a disconnect;
otherwise (a 401 from sign-in, a 413, a GET that ignores its body) the connection is closed
without a word, since the rest of the body could not be told from a next request.

A body awaiting `100 Continue` is not counted until uvicorn has sent it (`awaits_continue`, looked
at every `CONTINUE_CHECK_SECONDS`). Its cost, about 1.7 microseconds a request, is measured in
docs/performance.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar, Protocol, cast

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.http.problems import problem_document

logger = logging.getLogger(__name__)

#: How long a refused connection reads and discards before it closes: closing with unread data
#: makes the kernel send a reset, which can destroy the answer before the client has read it.
LINGER_SECONDS = 2.0
#: How often the front door looks whether a request waiting for `100 Continue` has had it: the
#: body's deadline starts at most this much after the interim answer went out.
CONTINUE_CHECK_SECONDS = 0.05

# Where the current request is, as the front door's own parser has seen it.
_IDLE = 0  # between requests (or before the first one)
_HEAD = 1  # the request line and headers have begun and not ended
_BODY = 2  # the head is complete; the body (if any) has not ended
_BROKEN = 3  # the bytes are not HTTP: the wrapped protocol answers 400 and closes
_REFUSED = 4  # answered 408 or 431, or hung up: discarding until closed


def _never() -> bool:
    return False


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
    return bool(getattr(getattr(inner, "cycle", None), "waiting_for_100_continue", False))


def response_started(inner: HTTPProtocol) -> bool:
    """Whether the app has begun to answer the request being read (True when it cannot be told)."""
    return bool(getattr(getattr(inner, "cycle", None), "response_started", True))


def refusal(status: int, detail: str, kind: str, default_headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The whole answer of a refusal (408, 431): a problem document like every other error, with
    the server's default headers (`Server`, `Date`) first and `Connection: close`."""
    phrase = HTTPStatus(status).phrase
    body = json.dumps({**problem_document(status, detail, kind), "title": phrase}).encode()
    lines = [f"HTTP/1.1 {status} {phrase}".encode()]
    lines += [name + b": " + value for name, value in default_headers]
    lines += [
        b"content-type: application/problem+json",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def seconds_text(seconds: float) -> str:
    return f"{seconds:g} second{'' if math.isclose(seconds, 1) else 's'}"


@dataclass(frozen=True)
class Limits:
    """The front door's settings, shared by every connection of one server. `draining` is True
    once the server is stopping: a connection whose first request arrives then is answered and
    closed (uvicorn asks only the connections it knows of to finish)."""

    header_timeout: float
    max_header_bytes: int
    body_timeout: float
    draining: Callable[[], bool] = _never
    inner: Callable[..., HTTPProtocol] = HttpToolsProtocol


def front_door(limits: Limits) -> type[asyncio.Protocol]:
    """The protocol class for `uvicorn.Config(http=...)` with these limits."""

    class FrontDoorProtocol(FrontDoor):
        pass

    FrontDoorProtocol.limits = limits

    return FrontDoorProtocol


NOT_HTTP = "The request is not valid HTTP/1.1; check its request line and headers, then retry."


class FrontDoor(asyncio.Protocol):
    """One connection: checks each request head's deadline and size, then passes it on; holds a
    body that comes after its head to its deadline."""

    limits: ClassVar[Limits]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        limits = self.limits
        self.timeout = limits.header_timeout
        self.max_bytes = limits.max_header_bytes
        self.body_timeout = limits.body_timeout
        self.draining = limits.draining
        self.loop = _loop or asyncio.get_running_loop()
        self.server_state = server_state
        self.inner = limits.inner(config=config, server_state=server_state, app_state=app_state)
        self.parser = httptools.HttpRequestParser(self)
        # As uvicorn sets it on its own parser: the two must stop at the same bytes.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.state = _IDLE
        #: Bytes of the current head so far (0 outside a head).
        self.head_bytes = 0
        #: Parser callbacks so far: tells whether a boundary fell inside the bytes just parsed.
        self.events = 0
        #: Whether a whole head has arrived: the wrapped protocol is connected from then on.
        self.seen_head = False
        self.connected = False
        #: What arrived before the first head was complete, for the wrapped protocol.
        self.pending: list[bytes] = []

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the `asyncio.Transport` methods without deriving from it.
        self.transport = cast(asyncio.Transport, transport)
        self.timer = self.loop.call_later(self.timeout, self._deadline)

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state == _REFUSED:
            return
        if state == _BROKEN:
            self._forward(data)
            return
        if state == _IDLE:
            # Blank lines before a request are skipped by the parser (RFC 9112, section 2.2);
            # passing them on would stop uvicorn's keep-alive timer, and never restart it.
            data = data.lstrip(b"\r\n")
            if not data:
                return
            room = self.max_bytes
        else:
            room = self.max_bytes - self.head_bytes
        if state != _BODY and len(data) > room:
            # Parse up to the limit first: a head still going on there is over it, and is
            # refused without the rest of the read being parsed or passed on.
            if self._parse(data[:room]):
                self._parse(data[room:])
        else:
            self._parse(data)
        if self.state == _REFUSED:
            return
        if self.state == _BROKEN and not self.connected:
            # Nothing of this connection has reached the server yet: answered here, as a problem
            # document like every other error (uvicorn's own answer is plain text).
            self._refuse(400, NOT_HTTP, "invalid-request")
            return
        if self.state == _HEAD and self.timer is None:
            self.timer = self.loop.call_later(self.timeout, self._deadline)
        self._forward(data)
        # After the wrapped protocol has parsed the head: the body timer asks it about the request.
        if self.state == _BODY and self.timer is None:
            self._arm_body_timer()

    def eof_received(self) -> bool | None:
        if self.connected:
            return self.inner.eof_received()
        return None  # closes: a connection without a whole request has nothing left to answer

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.pending = []
        if self.connected:
            self.connected = False
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.connected:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.connected:
            self.inner.resume_writing()

    # httptools parser callbacks (only these three: with no `on_header` or `on_url`, the parser
    # keeps no header bytes of its own)

    def on_message_begin(self) -> None:
        self.state = _HEAD
        self.head_bytes = 0
        self.events += 1

    def on_headers_complete(self) -> None:
        self.state = _BODY
        self.head_bytes = 0
        self.events += 1
        self.seen_head = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def on_message_complete(self) -> None:
        self.state = _IDLE
        self.events += 1
        if self.timer is not None:  # the body timer: the only one that runs inside a message
            self.timer.cancel()
            self.timer = None

    def _parse(self, data: bytes) -> bool:
        """Run the parser over `data` and count head bytes; False if the parser stopped early."""
        before, events = self.state, self.events
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The wrapped protocol's parser stops at the same byte, takes the upgrade or leaves
            # the rest of this read unparsed; this parser does the same.
            return False
        except httptools.HttpParserError:
            self.state = _BROKEN
            self._cancel_timer()
            return False
        if self.state == _HEAD:
            boundaries = self.events - events
            if boundaries == 0:
                self.head_bytes += len(data)
            elif boundaries == 1 and before == _IDLE:
                self.head_bytes = len(data)
            # else the head began partway through `data`: counted from the next read on.
            # Unfinished after `max_bytes` bytes: longer than that.
            if self.head_bytes >= self.max_bytes:
                self._refuse(
                    431,
                    f"The request line and headers are larger than {self.max_bytes} bytes; "
                    "send fewer or smaller headers.",
                    "headers-too-large",
                )
                return False
        return True

    def _forward(self, data: bytes) -> None:
        if self.connected:
            self.inner.data_received(data)
        elif self.seen_head or self.state == _BROKEN:
            self.connected = True
            self.inner.connection_made(self.transport)
            if self.pending:
                data = b"".join((*self.pending, data))
                self.pending = []
            self.inner.data_received(data)
            if self.draining():
                self.inner.shutdown()
        else:
            self.pending.append(data)

    def _deadline(self) -> None:
        self.timer = None
        if self.state not in (_IDLE, _HEAD):
            return
        assert self.transport is not None
        if not self.transport.is_reading():
            # The wrapped protocol paused reading (a pipelined request waits for the one before
            # it): the head cannot arrive, and that is not the client's doing.
            self.timer = self.loop.call_later(self.timeout, self._deadline)
            return
        self._refuse(
            408,
            f"The request line and headers did not arrive within {seconds_text(self.timeout)}; "
            "send them at once, then retry.",
            "timeout",
        )

    def _arm_body_timer(self) -> None:
        if awaits_continue(self.inner):
            self.timer = self.loop.call_later(CONTINUE_CHECK_SECONDS, self._continue_check)
        else:
            self.timer = self.loop.call_later(self.body_timeout, self._body_deadline)

    def _continue_check(self) -> None:
        self.timer = None
        if self.state == _BODY:
            self._arm_body_timer()

    def _body_deadline(self) -> None:
        self.timer = None
        if self.state != _BODY:
            return
        assert self.transport is not None
        if not self.transport.is_reading():
            self.timer = self.loop.call_later(self.body_timeout, self._body_deadline)
            return
        detail = (
            f"The request body did not arrive within {seconds_text(self.body_timeout)}; "
            "send it at once, then retry."
        )
        if response_started(self.inner):
            self._hang_up(detail)
        else:
            self._refuse(408, detail, "timeout")

    def _refuse(self, status: int, detail: str, kind: str) -> None:
        logger.debug("front door answered %d: %s", status, detail)
        self._hang_up(detail, refusal(status, detail, kind, self.server_state.default_headers))

    def _hang_up(self, reason: str, answer: bytes = b"") -> None:
        """Stop the connection: write `answer` (if any), stop sending, discard, then close."""
        transport = self.transport
        assert transport is not None
        self.state = _REFUSED
        self._cancel_timer()
        self.pending = []
        if self.connected:
            # The wrapped protocol lets go of the connection: whatever it was still answering
            # is abandoned, as on a disconnect, and it writes nothing more.
            self.connected = False
            self.inner.connection_lost(ConnectionAbortedError(reason))
        if answer:
            transport.write(answer)
        if transport.can_write_eof():
            transport.write_eof()
            transport.resume_reading()
            self.timer = self.loop.call_later(LINGER_SECONDS, transport.close)
        else:
            transport.close()

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
