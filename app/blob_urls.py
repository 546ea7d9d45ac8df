"""Blob Storage URLs taken apart, without the Azure SDK: what a setting or a command-line
argument is checked with, and what `app.knowledge.blob` reaches blobs by.

A location is `https://ACCOUNT.blob.core.windows.net/CONTAINER/PATH` (or another Azure cloud's
blob host, a private endpoint's), or for a local emulator the path-style
`http://HOST:PORT/ACCOUNT/CONTAINER/PATH`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

_EXAMPLE = "https://ACCOUNT.blob.core.windows.net/CONTAINER/PATH"
_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}|\$root|\$web")


class BlobStorageError(OSError):
    """A blob location that cannot be used; the message names it and says what to change."""


@dataclass(frozen=True)
class BlobLocation:
    """A blob URL taken apart: the account's endpoint, the container, and the blob's name (or,
    for a folder of documents, the prefix its names start with; "" for the whole container)."""

    url: str
    account_url: str
    account: str
    container: str
    name: str


def _virtual_hosted(host: str) -> bool:
    """`ACCOUNT.blob.core.windows.net`, and the blob hosts of other clouds, private endpoints and
    DNS zones (`ACCOUNT.privatelink.blob...`, `ACCOUNT.z01.blob.storage.azure.net`)."""
    labels = host.lower().split(".")
    return len(labels) >= 3 and "blob" in labels[1:-1]


def is_blob_url(value: str) -> bool:
    """Whether `value` names a blob location rather than a local path (see the module)."""
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return False
    if _virtual_hosted(parts.hostname):
        return True
    try:
        return parts.port is not None  # an emulator, path-style
    except ValueError:
        return True  # a URL with a bad port: let `parse_blob_url` say what is wrong


def parse_blob_url(url: str, *, prefix: bool = False) -> BlobLocation:
    """The location `url` names: a blob, or with `prefix` a folder of blobs (its name then ends
    with "/" unless it is the whole container). `BlobStorageError` says what is missing."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise BlobStorageError(f"{url} is not a Blob Storage URL: give {_EXAMPLE}")
    if parts.query or parts.fragment:
        raise BlobStorageError(
            f"{url.split('?', 1)[0].split('#', 1)[0]} is given with a query or fragment: give the URL "
            "without it (Anvil signs in with its identity; no SAS token is needed)"
        )
    try:
        parts.port  # noqa: B018 - read for its check of the port
    except ValueError:
        raise BlobStorageError(f"{url} has an invalid port: give {_EXAMPLE}") from None
    segments = [unquote(segment) for segment in parts.path.split("/")[1:]]
    base = f"{parts.scheme.lower()}://{parts.netloc}"
    if _virtual_hosted(parts.hostname):
        account = parts.hostname.split(".", 1)[0]
        account_url = base
    elif segments and segments[0]:
        account, segments = segments[0], segments[1:]
        account_url = f"{base}/{account}"
    else:
        raise BlobStorageError(
            f"{url} names no storage account: give {_EXAMPLE} (or, for an emulator, "
            "http://HOST:PORT/ACCOUNT/CONTAINER/PATH)"
        )
    if not segments or not segments[0]:
        raise BlobStorageError(f"{url} names no container: give {_EXAMPLE}")
    container, name = segments[0], "/".join(segments[1:])
    if not _CONTAINER.fullmatch(container):
        raise BlobStorageError(
            f"{url}: {container!r} is not a container name: container names are 3 to 63 lowercase "
            "letters, digits and single hyphens"
        )
    if prefix:
        name = name if not name or name.endswith("/") else f"{name}/"
    elif not name or name.endswith("/"):
        raise BlobStorageError(f"{url} names a container or folder, not a blob: give {_EXAMPLE}")
    return BlobLocation(url=url, account_url=account_url, account=account, container=container, name=name)
