"""The front door against a real `anvil serve`, with raw sockets: kept-alive connections closed
when idle, pipelined and non-HTTP input, and bodies that do not arrive in time (408, or a closed
connection once the request is answered). What it fixed, slow and huge request heads and bodies
that never start, is pinned in tests/regressions/."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.anvil_server import AnvilServer
from support.raw_http import (
    KEEP_ALIVE,
    SLACK,
    Reader,
    ask_head,
    connect,
    front_door_server,
    problem_of,
    request,
    status_of,
    wait_closed,
)

#: Shorter than the front door's usual test limit: four tests wait it out, and the 401 that
#: must come before it comes within milliseconds.
BODY_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    folder = tmp_path_factory.mktemp("front-door")
    with front_door_server(folder, ANVIL_BODY_TIMEOUT_SECONDS=str(BODY_TIMEOUT)) as running:
        yield running


@pytest.mark.parametrize("dribble", [None, b"\r\n"], ids=["silent", "sending blank lines"])
def test_an_idle_kept_alive_connection_is_closed_after_the_keep_alive_timeout(
    server: AnvilServer, dribble: bytes | None
) -> None:
    with connect(server) as sock:
        sock.sendall(request("/healthz"))
        assert Reader(sock).response()[0] == 200
        answered = time.monotonic()
        response, closed = wait_closed(sock, dribble)
    # uvicorn's own keep-alive close, with no answer; blank lines do not put it off.
    assert response == b""
    assert KEEP_ALIVE * 0.9 <= closed - answered <= KEEP_ALIVE + SLACK


def test_pipelined_requests_with_bodies_are_answered_in_order(server: AnvilServer) -> None:
    token = {"Authorization": f"Bearer {server.token('alice')}", "Content-Type": "application/json"}
    chunked = (
        b"POST /api/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in token.items()).encode()
        + b'\r\n10\r\n{"question": "tw\r\n5\r\no"}  \r\n0\r\n\r\n'
    )
    with connect(server) as sock:
        sock.sendall(
            request("/healthz")
            + request("/api/ask", method="POST", headers=token, body=b'{"question": "one"}')
            + chunked
            + b"\r\n"  # a blank line between requests is allowed
            + request("/api/conversations", headers={"Authorization": token["Authorization"]})
        )
        reader = Reader(sock)
        answers = [reader.response() for _ in range(4)]
    assert [status for status, _, _ in answers] == [200, 200, 200, 200]
    assert json.loads(answers[1][2])["answer"] == "Echo: one"
    assert json.loads(answers[2][2])["answer"] == "Echo: two"


def test_bytes_that_are_not_http_still_get_400(server: AnvilServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00 not http\r\n\r\n")
        response, _ = wait_closed(sock)
    assert status_of(response) == 400
    problem = problem_of(response)
    assert problem["status"] == 400 and problem["detail"].startswith("The request is not valid HTTP/1.1")


QUESTION = b'{"question": "in time?"}'


def test_a_signed_in_body_that_stalls_gets_408_and_the_connection_closes(server: AnvilServer) -> None:
    with connect(server) as sock:
        sock.sendall(ask_head(server, length=10) + b'{"q')
        started = time.monotonic()
        response, closed = wait_closed(sock)
    assert status_of(response) == 408
    problem = problem_of(response)
    assert (
        problem["detail"] == "The request body did not arrive within 1 second; send it at once, then retry."
    )
    assert BODY_TIMEOUT * 0.9 <= closed - started <= BODY_TIMEOUT + SLACK


def test_a_body_sent_at_once_is_answered_and_the_connection_kept(server: AnvilServer) -> None:
    with connect(server) as sock:
        reader = Reader(sock)
        head = ask_head(server, length=len(QUESTION))
        sock.sendall(head)
        sock.sendall(QUESTION)  # in a read of its own, as often over a network
        status, _, body = reader.response()
        assert status == 200
        assert json.loads(body)["answer"] == "Echo: in time?"
        sock.sendall(head + QUESTION)
        assert reader.response()[0] == 200


@pytest.mark.parametrize("send_body", [True, False], ids=["then the body", "then nothing"])
def test_a_client_that_expects_100_continue_sends_its_body_after_it(
    server: AnvilServer, send_body: bool
) -> None:
    continued = b"HTTP/1.1 100 Continue\r\n\r\n"
    with connect(server) as sock:
        reader = Reader(sock)
        sock.sendall(ask_head(server, length=len(QUESTION), expect=True))
        assert reader.head() == continued
        if send_body:
            sock.sendall(QUESTION)
            status, _, body = reader.response()
            assert status == 200
            assert json.loads(body)["answer"] == "Echo: in time?"
        else:
            # The deadline runs from the 100 Continue, and the answer is the usual 408.
            started = time.monotonic()
            response, closed = wait_closed(sock)
            assert reader.buffer == b""
            assert status_of(response) == 408
            assert BODY_TIMEOUT * 0.9 <= closed - started <= BODY_TIMEOUT + SLACK


@pytest.mark.parametrize("dribble", [None, b"a"], ids=["silent", "dribbling its body"])
def test_a_tokenless_post_gets_401_from_its_head_and_is_closed_within_the_body_deadline(
    server: AnvilServer, dribble: bytes | None
) -> None:
    with connect(server) as sock:
        sock.sendall(ask_head(server, length=1000, token=False) + b'{"q')
        started = time.monotonic()
        reader = Reader(sock)
        status, headers, _ = reader.response()
        answered = time.monotonic()
        assert status == 401
        assert "www-authenticate" in headers
        # Before the body's deadline: sign-in did not wait for the body.
        assert answered - started < BODY_TIMEOUT
        assert reader.buffer == b""
        response, closed = wait_closed(sock, dribble)
    assert response == b""  # answered once: no 408 after the 401
    assert closed - started <= BODY_TIMEOUT + SLACK


def test_the_front_door_limits_are_documented_with_what_the_ingress_should_do() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    deployment = (docs / "deployment.md").read_text(encoding="utf-8")
    for setting in (
        "ANVIL_HEADER_TIMEOUT_SECONDS",
        "ANVIL_MAX_HEADER_BYTES",
        "ANVIL_KEEP_ALIVE_SECONDS",
        "ANVIL_BODY_TIMEOUT_SECONDS",
        "ANVIL_MAX_CONCURRENT_REQUESTS",
        "ANVIL_DRAIN_SECONDS",
    ):
        assert setting in deployment
    assert "431" in deployment
