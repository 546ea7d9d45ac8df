"""Which bearer token the client commands (`anvil ask`, `anvil bridge`) send, and where it comes from.

In order: a token given with `--token`, else `ANVIL_TOKEN`; else, for a server on this machine
whose local settings are dev sign-in, a dev token for the OS user minted with the data folder's
key (never creating a key: a folder without one is not the folder any running dev server uses);
else what the server's RFC 9728 document says: no token when it has none (sign-in off), the
signed-in user's Entra token from the MSAL cache when it names Entra (`anvil login`).
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

from app.bridge import TokenSource

if TYPE_CHECKING:
    from app.adapters.auth.dev import DevIssuer
    from app.settings import Settings

#: What a dev user name may hold (the issuer's own rule); anything else in an OS user name is replaced.
_DEV_USER_CHARS = re.compile(r"[^A-Za-z0-9._@-]")


class SignInProblem(Exception):
    """No token can be had without the user doing something; the message says what."""


@dataclass(frozen=True)
class Choice:
    """The token source (None: send no token) and a hint to add when the server refuses sign-in."""

    source: TokenSource | None
    hint: str | None = None


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
    from app.adapters.auth.dev import DevIssuer

    try:
        return DevIssuer.load_or_create(data_dir)
    except OSError as error:
        raise ValueError(f"cannot use the dev key in {data_dir}: {error.strerror or error}") from None


def choose(url: str, token: str | None, settings: Callable[[], Settings]) -> Choice:
    """The token source for the server at `url` (a base URL or its `/mcp` endpoint).

    `settings` loads the local settings, only when they matter (a server on this machine).
    """
    if token:
        return Choice(TokenSource.fixed(token))
    if os.environ.get("ANVIL_TOKEN"):
        return Choice(TokenSource.fixed(os.environ["ANVIL_TOKEN"]))
    if is_loopback_url(url):
        local = settings()
        if local.auth_mode == "dev":
            return _dev_choice(local.data_dir.resolve())
    return Choice(None)


def _dev_choice(data_dir: Path) -> Choice:
    from app.adapters.auth.dev import KEY_FILE_NAME

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
