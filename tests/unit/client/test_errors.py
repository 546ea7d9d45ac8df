"""One client error type, with the exit codes the client commands end with."""

from __future__ import annotations

import pytest

from app.client.errors import (
    EXIT_BUSY,
    EXIT_PROBLEM,
    EXIT_SIGN_IN,
    EXIT_UNREACHABLE,
    ClientError,
    DevServer,
    DiscoveryError,
    ServerUnreachable,
    SignInError,
    SignInFailed,
    SignInNotNeeded,
    SignInRequired,
    SignInUnavailable,
    first_line,
)


def test_the_exit_codes_are_the_documented_ones() -> None:
    assert (EXIT_UNREACHABLE, EXIT_SIGN_IN, EXIT_BUSY, EXIT_PROBLEM) == (3, 4, 5, 6)


def test_a_client_error_carries_its_message_and_exit_code() -> None:
    error = ClientError("the server is busy", EXIT_BUSY)
    assert (error.message, str(error), error.exit_code) == ("the server is busy", "the server is busy", 5)
    assert ClientError("something else").exit_code == EXIT_PROBLEM


@pytest.mark.parametrize(
    ("kind", "exit_code"),
    [
        (SignInError, 4),
        (DiscoveryError, 4),
        (SignInNotNeeded, 4),
        (DevServer, 4),
        (SignInRequired, 4),
        (SignInFailed, 4),
        (SignInUnavailable, 4),
        (ServerUnreachable, 3),
    ],
)
def test_every_sign_in_failure_is_a_client_error_with_its_exit_code(
    kind: type[SignInError], exit_code: int
) -> None:
    error = kind("why")
    assert isinstance(error, ClientError)
    assert (error.message, error.exit_code) == ("why", exit_code)


def test_first_line_keeps_one_short_line() -> None:
    assert first_line("\n  AADSTS50076: more needed  \nTrace ID: 1\n") == "AADSTS50076: more needed"
    assert first_line(ValueError("")) == "ValueError"
    assert first_line("x" * 400) == "x" * 297 + "..."
