"""`anvil ask`'s REST client: the answer envelope, or one `ClientError` with its exit code."""

from __future__ import annotations

import socket

import pytest
from support.canned_http import Canned, canned_server

from app.client.errors import EXIT_BUSY, EXIT_PROBLEM, EXIT_SIGN_IN, EXIT_UNREACHABLE, ClientError
from app.client.rest import ask, render_answer

ENVELOPE = {"answer": "Forty-two.", "sources": [{"source": "guide.md", "heading": "Answers"}]}


def test_ask_posts_the_question_with_the_token_and_returns_the_envelope() -> None:
    with canned_server({"/api/ask": Canned(200, ENVELOPE)}) as server:
        envelope = ask(f"{server.url}/", "Why?", conversation_id="c-1", instructions="Be brief.", token="t0k")
    assert envelope == ENVELOPE
    [(method, path, headers, body)] = server.requests
    assert (method, path, headers["Authorization"]) == ("POST", "/api/ask", "Bearer t0k")
    assert body == b'{"question":"Why?","conversationId":"c-1","instructions":"Be brief."}'


@pytest.mark.parametrize(
    ("answer", "exit_code", "words"),
    [
        (
            Canned(401, {"detail": "The access token has expired."}),
            EXIT_SIGN_IN,
            "sign-in was refused (HTTP 401",
        ),
        (Canned(403, {"title": "Forbidden"}), EXIT_SIGN_IN, "Forbidden"),
        (Canned(503, {"detail": "Too busy."}, {"Retry-After": "7"}), EXIT_BUSY, "retry in 7 s"),
        (Canned(429, {"detail": "Slow down."}, {"Retry-After": "0.2"}), EXIT_BUSY, "retry in 1 s"),
        (Canned(503, {"detail": "Too busy."}), EXIT_BUSY, "retry later"),
        (Canned(404, {"detail": "No such   conversation."}), EXIT_PROBLEM, "HTTP 404: No such conversation."),
        (
            Canned(502, b"<html>", {"Content-Type": "text/html"}),
            EXIT_PROBLEM,
            "(text/html); is this an Anvil",
        ),
        (Canned(200, b"[]", {"Content-Type": "application/json"}), EXIT_PROBLEM, "without a JSON object"),
    ],
)
def test_every_failure_is_one_line_and_its_exit_code(answer: Canned, exit_code: int, words: str) -> None:
    with canned_server({"/api/ask": answer}) as server, pytest.raises(ClientError) as failed:
        ask(server.url, "Why?")
    assert failed.value.exit_code == exit_code
    assert words in failed.value.message
    assert "\n" not in failed.value.message


def test_a_server_that_is_not_there_is_exit_3() -> None:
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        port = reserved.getsockname()[1]
    with pytest.raises(ClientError) as failed:
        ask(f"http://127.0.0.1:{port}", "Why?")
    assert failed.value.exit_code == EXIT_UNREACHABLE
    assert "cannot reach the server" in failed.value.message and "anvil serve" in failed.value.message


def test_an_answer_is_rendered_with_its_sources_and_turn() -> None:
    text = render_answer(
        {
            **ENVELOPE,
            "conversationId": "c-1",
            "turn": 2,
            "sources": [*ENVELOPE["sources"], {"source": "faq.md"}],
        }
    )
    assert text == "Forty-two.\n\nSources:\n- guide.md (Answers)\n- faq.md\n\n(conversation c-1, turn 2)"
