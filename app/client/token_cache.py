"""Where the signed-in user's tokens are kept: MSAL's token cache, persisted in one file.

The cache (`SignInSettings.cache_path`, default `token-cache.bin` in Anvil's config folder, or
`ANVIL_TOKEN_CACHE`) is encrypted where the operating system offers it: DPAPI on Windows, the
Keychain on macOS, libsecret on Linux. Where it does not (Linux without libsecret or a D-Bus
session: servers, containers, CI), it is a plain file readable by its owner only (0600) in a
folder that, when this module creates it, is the owner's only (0700).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msal_extensions import (  # type: ignore[import-untyped, unused-ignore]
    FilePersistence,
    PersistedTokenCache,
    build_encrypted_persistence,
)

from app.client.errors import SignInUnavailable, first_line
from app.private_files import private_file

logger = logging.getLogger(__name__)

#: Environment variable naming the token cache file (overrides the default location).
TOKEN_CACHE_VARIABLE = "ANVIL_TOKEN_CACHE"
CACHE_FILE_NAME = "token-cache.bin"


def default_cache_path(environ: Mapping[str, str] | None = None) -> Path:
    """`ANVIL_TOKEN_CACHE`, else `token-cache.bin` in Anvil's config folder.

    The folder is `%APPDATA%\\anvil` on Windows, else `$XDG_CONFIG_HOME/anvil` or `~/.config/anvil`.
    """
    env = os.environ if environ is None else environ
    if env.get(TOKEN_CACHE_VARIABLE):
        return Path(env[TOKEN_CACHE_VARIABLE]).expanduser()
    if sys.platform == "win32":
        appdata = env.get("APPDATA")
        base = Path(appdata) if appdata else Path.home() / "AppData" / "Roaming"
    else:
        xdg = env.get("XDG_CONFIG_HOME")
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "anvil" / CACHE_FILE_NAME


def open_cache(path: Path, *, encrypt: bool) -> tuple[Any, bool]:
    """MSAL's cache persisted at `path`, and whether it is encrypted (`encrypt=False`: never)."""
    try:
        # Owner-only whatever the umask; a cache left wider by an earlier version is narrowed.
        private_file(path, narrow=True)
    except OSError as error:
        raise SignInUnavailable(f"cannot create the token cache {path}: {first_line(error)}") from None
    persistence: Any = None
    if encrypt:
        try:
            persistence = build_encrypted_persistence(str(path))
        except Exception as error:  # Any failure of the OS keyring means: no encryption here.
            logger.debug("token cache not encrypted (%s); using an owner-only file", type(error).__name__)
    if persistence is None:
        persistence = FilePersistence(str(path))
    return PersistedTokenCache(persistence), bool(persistence.is_encrypted)
