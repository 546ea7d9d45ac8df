"""The one check of a URL Anvil is given (a setting, a discovery document, `--url`).

It imports nothing of Anvil's, so the settings, the server's sign-in and the client commands all
share it. Each caller names the URL in its own words; `checked_url` says what is wrong with it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether `host` (a bind address or host name) only accepts local connections."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def checked_url(url: str, *, https: bool = False, bare: bool = True, example: str = "https://host") -> str:
    """`url` without a trailing `/`, once it is an absolute http(s) URL with a host and a usable
    port; else `ValueError` whose message completes "<the URL's name> ...".

    `https`: plain http only for a loopback host (a local stand-in), since a token or a key set
    crossing a network must be protected. `bare`: no query or fragment, for a base URL that paths
    are appended to. `example` shows the expected form in the message.
    """
    scheme = "https" if https else "http(s)"
    without = " without query or fragment" if bare else ""
    refusal = ValueError(f"must be an absolute {scheme} URL{without}, e.g. {example}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is not a number, or an unbalanced IPv6 bracket
        raise refusal from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise refusal
    if bare and (parts.query or parts.fragment):
        raise refusal
    if https and parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError(f"must use https (plain http only for a loopback address), e.g. {example}")
    return url.rstrip("/")
