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

from app.client.errors import DevServer, ServerUnreachable, SignInNotNeeded
from app.devkey import DevKey
from app.urls import is_loopback

if TYPE_CHECKING:
    from app.client.signin import UserSignIn

#: What a dev user name may hold (the key's own rule); anything else in an OS user name is replaced.
_DEV_USER_CHARS = re.compile(r"[^A-Za-z0-9._@-]")

#: The public client `anvil login` and the bridge sign in with, when not the default (the Azure
#: CLI's, which Anvil's deployment pre-authorises). Login and bridge must use the same one.
CLIENT_ID_VARIABLE = "ANVIL_SIGN_IN_CLIENT_ID"


@dataclass(frozen=True)
class TokenSource:
    """Where bearer tokens come from: `get(refresh)` returns one, blocking (MSAL reads its cache
    file and may call Entra), and with `refresh=True` is asked for a new one after the server
    refused the last; `renewable` says whether that can give a different token."""

    get: Callable[[bool], str]
    renewable: bool

    @classmethod
    def fixed(cls, token: str) -> TokenSource:
        """A token given on the command line or in `ANVIL_TOKEN`: sent as is, never renewed."""
        return cls(lambda _refresh: token, renewable=False)


@dataclass(frozen=True)
class Choice:
    """The token source (None: send no token), a hint to add when the server refuses sign-in, and
    the user's Entra sign-in when that is where tokens come from; who the token signs in (when
    known) and how to ask as someone else."""

    source: TokenSource | None
    hint: str | None = None
    sign_in: UserSignIn | None = None
    who: str | None = None
    switch: str | None = None


def token_user(token: str) -> str | None:
    """The user a bearer token names (`name`, else `preferred_username`), read without checking
    the token: for saying whose conversation is continued, never for trusting it."""
    import base64
    import json

    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    if not isinstance(claims, dict):
        return None
    name = claims.get("name") or claims.get("preferred_username")
    return name if isinstance(name, str) and name else None


def local_user() -> str:
    """The current OS user's name, made a valid dev user name ("anvil" if there is none)."""
    try:
        name = getpass.getuser()
    except (OSError, KeyError):
        name = ""
    return _DEV_USER_CHARS.sub("-", name)[:64] or "anvil"


def is_loopback_url(url: str) -> bool:
    """Whether `url` names a server on this machine."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host is not None and is_loopback(host)


def choose(url: str, token: str | None, data_dir: Callable[[], Path]) -> Choice:
    """The token source for the server at `url` (a base URL or its `/mcp` endpoint).

    `data_dir` says where the local dev key is, asked only when it matters (a dev server on this
    machine). Raises a `SignInError` when the server's sign-in settings cannot be read, or it is a
    dev server elsewhere (whose tokens only `anvil token` on its machine can mint).
    """
    given = token or os.environ.get("ANVIL_TOKEN")
    if given:
        hint = "the token given was refused" if token else "the token in ANVIL_TOKEN was refused"
        switch = "pass another user's token with --token"
        return Choice(TokenSource.fixed(given), hint, who=token_user(given), switch=switch)
    try:
        sign_in = _user_sign_in(url)
    except SignInNotNeeded:
        return Choice(None)
    except ServerUnreachable:
        return Choice(None)  # the request itself then fails, saying so in the caller's words
    except DevServer:
        if is_loopback_url(url):
            return _dev_choice(data_dir().resolve())
        raise
    account = sign_in.who()
    return Choice(
        TokenSource(lambda refresh: sign_in.token(force_refresh=refresh), renewable=True),
        f"sign in again with `anvil login --url {url}`",
        sign_in,
        who=None if account is None else account.username,
        switch=f"sign in as them with `anvil logout --url {url}` then `anvil login --url {url}`",
    )


def sign_in_for(url: str) -> UserSignIn | None:
    """The user's sign-in to the server at `url`, as its RFC 9728 document describes it; None when
    the server asks for no sign-in; a `SignInError` when it cannot be asked (`ServerUnreachable`)
    or is a dev server."""
    try:
        return _user_sign_in(url)
    except SignInNotNeeded:
        return None


def _user_sign_in(url: str) -> UserSignIn:
    # Imported here, and MSAL (with `signin`) only once the server names Entra: it takes about a
    # third of a second to import, which a given token, a dev server or no sign-in never need.
    from app.client.discovery import discover

    settings = discover(url, client_id=os.environ.get(CLIENT_ID_VARIABLE) or None)
    from app.client.signin import UserSignIn

    return UserSignIn(settings)


def _dev_choice(data_dir: Path) -> Choice:
    try:
        key = DevKey.existing(data_dir)
    except ValueError as error:
        return Choice(None, str(error))
    if key is None:
        return Choice(None, f"no dev key in {data_dir}, so no token was sent")
    user = local_user()
    return Choice(
        TokenSource(lambda _refresh: key.mint(user), renewable=True),
        f"sent a dev token for {user!r} signed with the key in {data_dir}",
        who=f"dev user {user} (this machine's user name)",
        switch='pass --token "$(anvil token --user NAME)"',
    )
