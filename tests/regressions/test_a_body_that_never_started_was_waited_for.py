"""A signed-in POST that declared a `Content-Length` and sent no body byte was held open for
ever: the body deadline started only with the first piece of the body. Fixed in 0.4.2 (408 at
`ANVIL_BODY_TIMEOUT_SECONDS`, and the connection closed)."""

from __future__ import annotations

import time

from support.anvil_server import AnvilServer
from support.raw_http import BODY_TIMEOUT, SLACK, ask_head, connect, problem_of, status_of, wait_closed


def test_a_signed_in_post_that_sends_no_body_byte_gets_408_and_the_connection_closes(
    front_door: AnvilServer,
) -> None:
    with connect(front_door) as sock:
        sock.sendall(ask_head(front_door, length=10))
        started = time.monotonic()
        response, closed = wait_closed(sock)
    assert status_of(response) == 408
    problem = problem_of(response)
    assert (
        problem["detail"] == "The request body did not arrive within 2 seconds; send it at once, then retry."
    )
    assert BODY_TIMEOUT * 0.9 <= closed - started <= BODY_TIMEOUT + SLACK
