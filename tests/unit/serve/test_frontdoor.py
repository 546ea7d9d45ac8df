"""The front door's bookkeeping, fed bytes directly: what reaches the wrapped protocol and when,
which heads are refused, and the deadlines for heads and bodies. (Against a real server:
tests/integration/test_front_door.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from app.serve import frontdoor
from app.serve.frontdoor import Limits, front_door

pytestmark = pytest.mark.anyio

LIMIT = 4096
GET = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
POST = b"POST /api/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
)


class Exchange:
    """Stands for uvicorn's exchange of the request being read: what the front door asks of it."""

    def __init__(self) -> None:
        self.response_started = False
        self.waiting_for_100_continue = False


class Recorder:
    """Stands for uvicorn's protocol: records what the front door hands it."""

    def __init__(self, **_: Any) -> None:
        self.cycle = Exchange()
        self.calls: list[str] = []
        self.received = bytearray()
        self.lost: Exception | None = None

    def connection_made(self, transport: Any) -> None:
        self.calls.append("connection_made")

    def data_received(self, data: bytes) -> None:
        self.calls.append("data_received")
        self.received += data

    def eof_received(self) -> bool | None:
        self.calls.append("eof_received")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append("connection_lost")
        self.lost = exc

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...

    def shutdown(self) -> None:
        self.calls.append("shutdown")


class Transport:
    """The transport methods the front door uses; `done` is set once it stops writing."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.eof = False
        self.closed = False
        self.reading = True
        self.done = asyncio.Event()
        self.gone = asyncio.Event()
        self.asked_if_reading = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.written += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True
        self.done.set()

    def close(self) -> None:
        self.closed = True
        self.done.set()
        self.gone.set()

    def is_closing(self) -> bool:
        return self.closed

    def is_reading(self) -> bool:
        self.asked_if_reading.set()
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def status(self) -> int:
        return int(bytes(self.written).split(b" ", 2)[1])

    def problem(self) -> dict[str, Any]:
        head, _, body = bytes(self.written).partition(b"\r\n\r\n")
        assert b"connection: close" in head
        assert b"content-type: application/problem+json" in head
        document: dict[str, Any] = json.loads(body)
        return document


def connection(
    timeout: float = 30.0, draining: bool = False, body_timeout: float = 30.0
) -> tuple[Any, Recorder, Transport]:
    cls = front_door(
        Limits(
            header_timeout=timeout,
            max_header_bytes=LIMIT,
            body_timeout=body_timeout,
            draining=lambda: draining,
            inner=Recorder,
        )
    )
    door: Any = cls(None, ServerState(), {})  # type: ignore[arg-type]
    transport = Transport()
    door.connection_made(transport)
    return door, door.inner, transport


async def test_the_wrapped_protocol_gets_the_connection_only_once_a_whole_head_has_arrived() -> None:
    door, inner, _ = connection()
    door.data_received(b"POST /api/ask HTTP/1.1\r\n")
    door.data_received(b"Host: 127.0.0.1\r\nContent-Length: 5\r\n")
    assert inner.calls == []
    door.data_received(b"\r\nhel")
    assert inner.calls == ["connection_made", "data_received"]
    door.data_received(b"lo")
    assert bytes(inner.received) == POST
    assert door.timer is None
    door.connection_lost(None)
    assert inner.calls[-1] == "connection_lost"


@pytest.mark.parametrize(
    "reads",
    [
        [GET + POST + CHUNKED + GET],
        [POST[:50], POST[50:] + GET[:10], GET[10:] + CHUNKED[:70], CHUNKED[70:]],
        [bytes([byte]) for byte in GET + CHUNKED],
    ],
    ids=["pipelined in one read", "split anywhere", "a byte at a time"],
)
async def test_pipelined_requests_and_bodies_pass_unchanged(reads: list[bytes]) -> None:
    door, inner, transport = connection()
    for read in reads:
        door.data_received(read)
    assert bytes(inner.received) == b"".join(reads)
    assert transport.written == b""
    assert door.timer is None


async def test_blank_lines_between_requests_are_not_passed_on() -> None:
    # They would stop uvicorn's keep-alive timer each time: a client could hold the connection.
    door, inner, _ = connection()
    door.data_received(GET)
    for _ in range(5):
        door.data_received(b"\r\n")
    door.data_received(b"\r\n" + GET)
    assert bytes(inner.received) == GET + GET
    assert door.timer is None


async def test_a_head_of_exactly_the_limit_is_served() -> None:
    head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
    head += b"a" * (LIMIT - len(head) - 4) + b"\r\n\r\n"
    assert len(head) == LIMIT
    door, inner, transport = connection()
    door.data_received(head)
    assert bytes(inner.received) == head
    assert transport.written == b""


@pytest.mark.parametrize("read_size", [LIMIT + 1, 1000, 2_000_000])
async def test_a_head_longer_than_the_limit_gets_431_having_passed_nothing_on(read_size: int) -> None:
    head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 2_000_000
    door, inner, transport = connection()
    for start in range(0, len(head), read_size):
        door.data_received(head[start : start + read_size])
        if transport.written:
            break
    assert transport.status() == 431
    assert transport.eof and not transport.closed
    assert inner.calls == []
    assert door.pending == []
    problem = transport.problem()
    assert problem["title"] == "Request Header Fields Too Large"
    assert str(LIMIT) in problem["detail"]
    door.data_received(b"more of it")  # discarded while the answer lingers
    assert inner.calls == []


async def test_a_long_head_on_a_kept_alive_connection_gets_431_and_the_wrapped_protocol_lets_go() -> None:
    door, inner, transport = connection()
    door.data_received(GET)
    door.data_received(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * LIMIT)
    assert transport.status() == 431
    assert inner.calls == ["connection_made", "data_received", "connection_lost"]
    assert isinstance(inner.lost, ConnectionAbortedError)
    assert bytes(inner.received) == GET
    door.connection_lost(None)
    assert inner.calls.count("connection_lost") == 1


async def test_a_connection_that_sends_no_whole_head_in_time_gets_408() -> None:
    door, inner, transport = connection(timeout=0.05)
    door.data_received(b"GET / HTTP/1.1\r\nHo")
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.status() == 408
    assert transport.problem()["type"].endswith("/timeout")
    assert inner.calls == []


async def test_a_kept_alive_connection_gets_the_deadline_from_the_first_byte_of_a_head() -> None:
    door, inner, transport = connection(timeout=0.05)
    door.data_received(GET)
    assert door.timer is None  # between requests: uvicorn's keep-alive timer
    door.data_received(b"G")
    assert door.timer is not None
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.status() == 408
    assert isinstance(inner.lost, ConnectionAbortedError)


async def test_no_408_while_the_wrapped_protocol_has_paused_reading() -> None:
    door, _, transport = connection(timeout=0.05)
    door.data_received(GET + b"GET / HT")
    transport.pause_reading()
    first = door.timer
    await asyncio.wait_for(transport.asked_if_reading.wait(), 5)
    assert transport.written == b""
    assert door.timer is not None and door.timer is not first
    transport.resume_reading()
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.status() == 408


async def test_a_refused_connection_closes_after_lingering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontdoor, "LINGER_SECONDS", 0.01)
    _, _, transport = connection(timeout=0.01)
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.eof and not transport.closed
    await asyncio.wait_for(transport.gone.wait(), 5)


async def test_bytes_that_are_not_http_are_answered_400_as_a_problem_and_never_reach_the_server() -> None:
    door, inner, transport = connection()
    door.data_received(b"\x16\x03\x01 not http\r\n\r\n")
    assert inner.calls == []
    assert transport.status() == 400 and transport.eof
    assert transport.problem()["detail"] == frontdoor.NOT_HTTP
    door.data_received(b"more")
    assert inner.calls == []


async def test_bytes_that_are_not_http_after_a_request_go_to_the_wrapped_protocol() -> None:
    # A request is already with the server: it answers that one, then its own 400 for the rest.
    door, inner, transport = connection()
    door.data_received(GET)
    door.data_received(b"\x16\x03\x01 not http\r\n\r\n")
    assert inner.calls == ["connection_made", "data_received", "data_received"]
    assert transport.written == b""
    door.data_received(b"more")
    assert bytes(inner.received).endswith(b"more")


async def test_a_first_request_arriving_while_draining_is_answered_then_closed() -> None:
    door, inner, _ = connection(draining=True)
    door.data_received(GET)
    assert inner.calls == ["connection_made", "data_received", "shutdown"]


async def test_an_end_of_file_before_a_whole_head_closes_the_connection() -> None:
    door, inner, _ = connection()
    door.data_received(b"GET / HTTP/1.1\r\n")
    assert not door.eof_received()
    assert inner.calls == []


HEAD_OF_POST = POST[: POST.index(b"\r\n\r\n") + 4]


@pytest.mark.parametrize(
    "reads",
    [[POST], [HEAD_OF_POST[:20], HEAD_OF_POST[20:] + b"hello"], [GET + POST + CHUNKED]],
    ids=["one read", "head in two reads", "pipelined"],
)
async def test_a_body_that_comes_with_its_head_arms_no_timer(reads: list[bytes]) -> None:
    door, _, _ = connection()
    for read in reads:
        door.data_received(read)
    assert door.timer is None


async def test_a_body_that_completes_later_cancels_its_timer() -> None:
    door, inner, transport = connection(body_timeout=0.05)
    door.data_received(HEAD_OF_POST + b"he")
    assert door.timer is not None
    door.data_received(b"llo")
    assert door.timer is None
    assert bytes(inner.received) == POST
    door.data_received(GET)
    assert door.timer is None and transport.written == b""


@pytest.mark.parametrize("sent", [b"", b"hel"], ids=["no body byte", "part of the body"])
async def test_a_body_that_does_not_arrive_in_time_gets_408_and_the_app_sees_a_disconnect(
    sent: bytes,
) -> None:
    door, inner, transport = connection(body_timeout=0.05)
    door.data_received(HEAD_OF_POST + sent)
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.status() == 408
    problem = transport.problem()
    assert problem["type"].endswith("/timeout")
    # Word for word what BodyGuard answered when it kept this deadline (docs quote it).
    assert (
        problem["detail"]
        == "The request body did not arrive within 0.05 seconds; send it at once, then retry."
    )
    assert isinstance(inner.lost, ConnectionAbortedError)
    door.data_received(b"lo")  # too late: discarded while the answer lingers
    assert bytes(inner.received) == HEAD_OF_POST + sent


async def test_a_request_already_answered_is_not_answered_again_at_the_body_deadline() -> None:
    # Sign-in runs before the body is read: a 401 goes out while the body is still owed.
    door, inner, transport = connection(body_timeout=0.05)
    door.data_received(HEAD_OF_POST)
    inner.cycle.response_started = True
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.written == b""
    assert transport.eof
    assert isinstance(inner.lost, ConnectionAbortedError)


async def test_a_wrapped_protocol_that_cannot_tell_is_hung_up_on_rather_than_answered_twice() -> None:
    door, inner, transport = connection(body_timeout=0.05)
    del inner.cycle
    door.data_received(HEAD_OF_POST)
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.written == b"" and transport.eof


async def test_no_body_deadline_while_the_wrapped_protocol_has_paused_reading() -> None:
    door, _, transport = connection(body_timeout=0.05)
    door.data_received(HEAD_OF_POST)
    transport.pause_reading()
    first = door.timer
    await asyncio.wait_for(transport.asked_if_reading.wait(), 5)
    assert transport.written == b""
    assert door.timer is not None and door.timer is not first
    transport.resume_reading()
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.status() == 408


async def test_the_body_deadline_waits_for_the_100_continue_and_runs_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(frontdoor, "CONTINUE_CHECK_SECONDS", 0.001)
    door, inner, transport = connection(body_timeout=0.05)
    inner.cycle.waiting_for_100_continue = True
    door.data_received(HEAD_OF_POST)
    loop = asyncio.get_running_loop()
    armed = loop.time()
    # Longer than the deadline, while the app has not asked for the body (a slow sign-in).
    while loop.time() < armed + 0.2:
        await asyncio.sleep(0.01)  # lets time pass for the front door's checks; waits on nothing
        assert transport.written == b""
    inner.cycle.waiting_for_100_continue = False  # the app read: uvicorn wrote 100 Continue
    sent = loop.time()
    await asyncio.wait_for(transport.done.wait(), 5)
    assert transport.status() == 408
    assert loop.time() - sent >= 0.05


async def test_a_body_sent_after_the_100_continue_is_served() -> None:
    door, inner, transport = connection(body_timeout=0.05)
    inner.cycle.waiting_for_100_continue = True
    door.data_received(HEAD_OF_POST)
    inner.cycle.waiting_for_100_continue = False
    door.data_received(b"hello")
    assert door.timer is None and transport.written == b""
    assert bytes(inner.received) == POST


class WatchedTransport(Transport):
    """A transport that tells when something has been written."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = asyncio.Event()
        self.write_times: list[float] = []

    def write(self, data: bytes) -> None:
        super().write(data)
        self.write_times.append(asyncio.get_running_loop().time())
        self.wrote.set()


async def until_written(transport: WatchedTransport, prefix: bytes) -> None:
    while not bytes(transport.written).startswith(prefix):
        transport.wrote.clear()
        await asyncio.wait_for(transport.wrote.wait(), 5)


@pytest.mark.parametrize("body_sent", [True, False], ids=["body sent after 100", "no body after 100"])
async def test_with_uvicorns_protocol_a_slow_app_does_not_use_up_a_100_continue_clients_deadline(
    body_sent: bool,
) -> None:
    # The real wrapped protocol: what the front door reads of its exchange must be there.
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(0.2)  # a sign-in slower than the body deadline
        message = await receive()
        body = message.get("body", b"")
        while message.get("more_body", False):
            message = await receive()
            body += message.get("body", b"")
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok" if body == b"hello" else b"no"})

    cls = front_door(Limits(header_timeout=30, max_header_bytes=LIMIT, body_timeout=0.05))
    door: Any = cls(Config(app, log_config=None, lifespan="off"), ServerState(), {})
    transport = WatchedTransport()
    door.connection_made(transport)
    door.data_received(HEAD_OF_POST.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n"))
    continued = b"HTTP/1.1 100 Continue\r\n\r\n"
    await until_written(transport, continued)
    if body_sent:
        door.data_received(b"hello")
        await until_written(transport, continued + b"HTTP/1.1 200 OK\r\n")
        assert bytes(transport.written).endswith(b"\r\n\r\nok")
    else:
        await asyncio.wait_for(transport.done.wait(), 5)
        assert bytes(transport.written).startswith(continued + b"HTTP/1.1 408 ")
        assert transport.write_times[1] - transport.write_times[0] >= 0.05
    door.connection_lost(None)
