"""The one error of the client commands (`anvil ask / bridge / login / logout`) and their exit codes.

Every failure a client command can meet becomes a `ClientError`: `message` is one line for a
person (never a traceback), `exit_code` what the command ends with. The kinds of sign-in failure
are subclasses, so a caller can tell them apart and still handle them all as one.

Exit codes (docs/clients.md shows them to users):

- 2: invalid arguments (argparse's own);
- 3 `EXIT_UNREACHABLE`: the server (or the sign-in service it names) could not be reached, or did
  not answer in time;
- 4 `EXIT_SIGN_IN`: sign-in was refused, or the user is not signed in;
- 5 `EXIT_BUSY`: the server is busy (429 or 503);
- 6 `EXIT_PROBLEM`: any other problem the server reported;
- 141: standard output was closed early (`app.cli`).
"""

from __future__ import annotations

EXIT_UNREACHABLE = 3
EXIT_SIGN_IN = 4
EXIT_BUSY = 5
EXIT_PROBLEM = 6


class ClientError(Exception):
    """A client command that could not do its job: `message` is one line, `exit_code` the status."""

    exit_code: int = EXIT_PROBLEM

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class SignInError(ClientError):
    """Signing in did not work; the message is one line saying why and what to do."""

    exit_code = EXIT_SIGN_IN


class DiscoveryError(SignInError):
    """The server's sign-in settings could not be read."""


class ServerUnreachable(DiscoveryError):
    """Nothing answered at the server's address."""

    exit_code = EXIT_UNREACHABLE


class SignInNotNeeded(DiscoveryError):
    """The server does not ask for sign-in (no RFC 9728 document): connect without a token."""


class DevServer(DiscoveryError):
    """The server is a local dev server: its tokens come from `anvil token`, not from Entra."""


class SignInRequired(SignInError):
    """No cached account or refresh token works any more: the user must run `anvil login`."""


class SignInFailed(SignInError):
    """A sign-in was started but did not succeed (declined, expired, refused by Entra)."""


class SignInUnavailable(SignInError):
    """The sign-in service (or the token cache) could not be used just now."""


def first_line(value: object) -> str:
    """The first non-empty line of a message (Entra appends trace ids on further lines), at most
    300 characters."""
    lines = [line.strip() for line in str(value).splitlines() if line.strip()]
    text = lines[0] if lines else type(value).__name__
    return text if len(text) <= 300 else text[:297] + "..."
