"""Which bearer token the client commands (`anvil ask`, `anvil bridge`) send, and where it comes from.

In order: a token given with `--token`, else `ANVIL_TOKEN`; else what the server's RFC 9728
document says: no token when it has none (sign-in off); for a dev server on this machine, a dev
token for the OS user minted with the local data folder's key (never creating a key: a folder
without one is not the folder any running dev server uses); when it names Entra, the signed-in
user's token from the MSAL cache (`anvil login`), renewed silently from the refresh token.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from app.client.bridge import TokenSource

if TYPE_CHECKING:
    from app.auth.dev import DevIssuer
    from app.client.login import UserSignIn
    from app.settings import Settings

#: What a dev user name may hold (the issuer's own rule); anything else in an OS user name is replaced.
_DEV_USER_CHARS = re.compile(r"[^A-Za-z0-9._@-]")


#: The public client `anvil login` and the bridge sign in with, when not the default (the Azure
#: CLI's, which Anvil's deployment pre-authorises). Login and bridge must use the same one.
CLIENT_ID_VARIABLE = "ANVIL_SIGN_IN_CLIENT_ID"


class SignInProblem(Exception):
    """No token can be had without the user doing something; the message says what, and
    `exit_code` is what the command ends with (3: the server cannot be reached; 4: sign-in)."""

    def __init__(self, message: str, exit_code: int = 4) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Choice:
    """The token source (None: send no token), a hint to add when the server refuses sign-in, and
    the user's Entra sign-in when that is where tokens come from."""

    source: TokenSource | None
    hint: str | None = None
    sign_in: UserSignIn | None = None


def local_user() -> str:
    """The current OS user's name, made a valid dev user name ("anvil" if there is none)."""
    try:
        name = getpass.getuser()
    except (OSError, KeyError):
        name = ""
    return _DEV_USER_CHARS.sub("-", name)[:64] or "anvil"


def is_loopback_url(url: str) -> bool:
    """Whether `url` names a server on this machine."""
    from app.settings import is_loopback

    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host is not None and is_loopback(host)


def dev_issuer(data_dir: Path) -> DevIssuer:
    """The dev issuer of `data_dir` (creating its key if needed); `ValueError` with one line if the
    key cannot be used."""
    from app.auth.dev import DevIssuer

    try:
        return DevIssuer.load_or_create(data_dir)
    except OSError as error:
        raise ValueError(f"cannot use the dev key in {data_dir}: {error.strerror or error}") from None


def choose(url: str, token: str | None, settings: Callable[[], Settings]) -> Choice:
    """The token source for the server at `url` (a base URL or its `/mcp` endpoint).

    `settings` loads the local settings, only when they matter (a dev server on this machine).
    Raises `SignInProblem` when the server's sign-in settings cannot be read, or it is a dev
    server elsewhere (whose tokens only `anvil token` on its machine can mint).
    """
    if token:
        return Choice(TokenSource.fixed(token), "the token given was refused")
    if os.environ.get("ANVIL_TOKEN"):
        return Choice(TokenSource.fixed(os.environ["ANVIL_TOKEN"]), "the token in ANVIL_TOKEN was refused")
    from app.client.login import (
        DevServer,
        ServerUnreachable,
        SignInError,
        SignInNotNeeded,
        UserSignIn,
        discover,
    )

    try:
        found = discover(url, client_id=os.environ.get(CLIENT_ID_VARIABLE) or None)
        sign_in = UserSignIn(found)
    except SignInNotNeeded:
        return Choice(None)
    except ServerUnreachable:
        return Choice(None)  # the request itself then fails, saying so in the caller's words
    except DevServer as error:
        if is_loopback_url(url):
            return _dev_choice(settings().data_dir.resolve())
        raise SignInProblem(str(error)) from None
    except SignInError as error:
        raise SignInProblem(str(error)) from None
    return Choice(
        TokenSource(lambda refresh: sign_in.token(force_refresh=refresh), renewable=True),
        f"sign in again with `anvil login --url {url}`",
        sign_in,
    )


def sign_in_for(url: str) -> UserSignIn | None:
    """The user's sign-in to the server at `url`, as its RFC 9728 document describes it; None when
    the server asks for no sign-in; `SignInProblem` when it cannot be asked or is a dev server."""
    from app.client.login import ServerUnreachable, SignInError, SignInNotNeeded, UserSignIn, discover

    try:
        found = discover(url, client_id=os.environ.get(CLIENT_ID_VARIABLE) or None)
        return UserSignIn(found)
    except SignInNotNeeded:
        return None
    except ServerUnreachable as error:
        raise SignInProblem(str(error), exit_code=3) from None
    except SignInError as error:
        raise SignInProblem(str(error)) from None


def _dev_choice(data_dir: Path) -> Choice:
    from app.auth.dev import KEY_FILE_NAME

    if not (data_dir / KEY_FILE_NAME).exists():
        return Choice(None, f"no dev key in {data_dir}, so no token was sent")
    user = local_user()
    try:
        issuer = dev_issuer(data_dir)
    except ValueError as error:
        return Choice(None, str(error))
    return Choice(
        TokenSource(lambda _refresh: issuer.mint(user), renewable=True),
        f"sent a dev token for {user!r} signed with the key in {data_dir}",
    )
