"""Knowledge index files and document folders in Azure Blob Storage, reached without keys.

A location is a blob URL, `https://ACCOUNT.blob.core.windows.net/CONTAINER/PATH` (or another
Azure cloud's blob host), or for a local emulator the path-style
`http://HOST:PORT/ACCOUNT/CONTAINER/PATH`. Anvil signs in with `DefaultAzureCredential`: its
managed identity in Azure (the user-assigned one `AZURE_CLIENT_ID` names), a developer's own
sign-in (`az login`) elsewhere. `AZURE_STORAGE_CONNECTION_STRING` is for local emulators only:
when set, its AccountName and AccountKey sign the requests instead.

A blob's ETag is its version: a replica polls `blob_version` (one HEAD request) and downloads
only when it changes. A download is pinned to one ETag, so a blob replaced while it is read is
read again whole, never mixed; an upload is committed whole, so readers see the old blob or the
new one. Every failure the SDK reports becomes a `BlobStorageError` naming the URL and what to
change; it is an `OSError`, as a file that cannot be read or written would raise.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, TokenCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.identity import DefaultAzureCredential
from azure.storage.blob import BlobServiceClient, ContentSettings, ExponentialRetry

from app.blob_urls import BlobLocation, BlobStorageError, parse_blob_url

logger = logging.getLogger(__name__)

#: The variable that, when set, signs requests with an emulator's account key.
CONNECTION_STRING = "AZURE_STORAGE_CONNECTION_STRING"
#: Retries of a failed request (throttling, a dropped connection) before it is reported.
RETRY_TOTAL = 3
#: Bytes per download request: a large index is fetched in ranges of this size, in parallel.
CHUNK_BYTES = 4 << 20
#: How many times a download starts again because the blob was replaced while it was read.
DOWNLOAD_ATTEMPTS = 3
_PARALLEL = 4
_READER = "Storage Blob Data Reader"
#: The block `check_writable` stages: as long as the ids of the blocks the SDK uploads a large blob in.
_PROBE_BLOCK = base64.b64encode(b"anvil-index-write-check".ljust(48, b"-")).decode()
_WRITER = "Storage Blob Data Contributor"


@functools.cache
def _identity() -> DefaultAzureCredential:
    # One credential for the process, so its tokens are cached and reused across requests.
    return DefaultAzureCredential()


def _key_credential(location: BlobLocation, connection_string: str) -> AzureNamedKeyCredential:
    fields = dict(part.split("=", 1) for part in connection_string.split(";") if "=" in part and part.strip())
    name, key = fields.get("AccountName", "").strip(), fields.get("AccountKey", "").strip()
    if not name or not key:
        raise BlobStorageError(
            f"{CONNECTION_STRING} has no AccountName and AccountKey: give the emulator's account and "
            "key, or unset it to sign in with an Azure identity"
        )
    if name != location.account:
        raise BlobStorageError(
            f"{CONNECTION_STRING} is for the account {name!r}, but {location.url} is in "
            f"{location.account!r}: give that account's connection string, or unset {CONNECTION_STRING}"
        )
    return AzureNamedKeyCredential(name, key)


def _service(location: BlobLocation) -> BlobServiceClient:
    connection_string = os.environ.get(CONNECTION_STRING, "").strip()
    credential: AzureNamedKeyCredential | TokenCredential
    if connection_string:
        credential = _key_credential(location, connection_string)
    elif not location.account_url.startswith("https://"):
        raise BlobStorageError(
            f"{location.url} is not https: signing in with an Azure identity needs https; "
            f"for a local emulator set {CONNECTION_STRING}"
        )
    else:
        credential = _identity()
    return BlobServiceClient(
        location.account_url,
        credential=credential,
        retry_policy=ExponentialRetry(
            initial_backoff=1, increment_base=2, retry_total=RETRY_TOTAL, random_jitter_range=1
        ),
        max_single_get_size=CHUNK_BYTES,
        max_chunk_get_size=CHUNK_BYTES,
    )


def _access_advice(role: str) -> str:
    if os.environ.get(CONNECTION_STRING, "").strip():
        return (
            f"the account key in {CONNECTION_STRING} is not accepted: give that account's key, "
            f"or unset {CONNECTION_STRING} to sign in with an Azure identity"
        )
    return (
        "the identity Anvil signs in as (its managed identity, the one AZURE_CLIENT_ID names, or your "
        f"`az login`) needs the {role} role on the storage account or the container"
    )


def _error_code(error: AzureError) -> str | None:
    """The storage error code (`BlobNotFound`, `AuthorizationFailure`), which the SDK adds."""
    code = getattr(error, "error_code", None)
    return str(code) if code else None


def _first_line(error: AzureError) -> str:
    lines = str(error.message or error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


@contextmanager
def _reported(location: BlobLocation, *, role: str = _READER) -> Iterator[None]:
    """The SDK's failures inside, as one `BlobStorageError` saying what to change."""
    url = location.url
    try:
        yield
    except BlobStorageError:
        raise
    except ResourceNotFoundError as error:
        if _error_code(error) == "ContainerNotFound":
            raise BlobStorageError(
                f"{url}: there is no container {location.container!r} in {location.account_url}: "
                "create it, or give a URL in a container that exists"
            ) from None
        raise BlobStorageError(f"no blob at {url}: build one with `anvil index ... --output {url}`") from None
    except (ClientAuthenticationError, HttpResponseError) as error:
        status = error.status_code
        if status in (401, 403):
            code = _error_code(error) or status
            raise BlobStorageError(f"access to {url} was refused ({code}): {_access_advice(role)}") from None
        if status is None and isinstance(error, ClientAuthenticationError):
            # No answer from storage: the credential found no identity to sign in as.
            raise BlobStorageError(
                f"cannot sign in to Blob Storage for {url} ({_first_line(error)}): in Azure give Anvil a "
                "managed identity (AZURE_CLIENT_ID names a user-assigned one); locally run `az login`"
            ) from None
        raise BlobStorageError(
            f"Blob Storage refused a request for {url} ({status} {_error_code(error) or ''}".rstrip()
            + f"): {_first_line(error)}"
        ) from None
    except (ServiceRequestError, ServiceResponseError) as error:
        raise BlobStorageError(
            f"cannot reach {location.account_url} for {url} ({_first_line(error)}): check the account "
            "name in the URL and that this network can reach it"
        ) from None
    except AzureError as error:
        raise BlobStorageError(f"cannot use {url}: {_first_line(error)}") from None


def blob_version(url: str) -> str | None:
    """The ETag of the blob at `url`, or None when there is no such blob (or container)."""
    location = parse_blob_url(url)
    with _reported(location), _service(location) as service:
        blob = service.get_blob_client(location.container, location.name)
        try:
            return str(blob.get_blob_properties().etag)
        except ResourceNotFoundError:
            return None


def download(url: str, into: BinaryIO) -> str:
    """Write the blob at `url` into `into` (from where it stands; seekable, so that a blob
    replaced while it is read is read again from the start) and return the ETag of exactly what
    was written."""
    location = parse_blob_url(url)
    start = into.tell()
    with _reported(location), _service(location) as service:
        blob = service.get_blob_client(location.container, location.name)
        for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
            etag = blob.get_blob_properties().etag
            try:
                # Every range request carries If-Match: one that finds another blob fails (412).
                downloader = blob.download_blob(
                    etag=etag, match_condition=MatchConditions.IfNotModified, max_concurrency=_PARALLEL
                )
                downloader.readinto(into)
            except HttpResponseError as error:
                if error.status_code != 412:
                    raise
                logger.info("blob: %s was replaced while it was read (attempt %d)", url, attempt)
                into.seek(start)
                into.truncate()
                continue
            return str(downloader.properties.etag)
    raise BlobStorageError(
        f"{url} was replaced {DOWNLOAD_ATTEMPTS} times while it was read: try again once it is written"
    )


def download_if_present(url: str, path: Path) -> bool:
    """Write the blob at `url` to the file `path`; False (and no file) when there is none. A
    rebuild reads the index it replaces this way, to reuse its vectors."""
    if blob_version(url) is None:
        return False
    try:
        with open(path, "wb") as into:
            download(url, into)
    except ResourceNotFoundError:  # deleted since it was looked at
        path.unlink(missing_ok=True)
        return False
    return True


def upload(path: Path, url: str) -> str:
    """Put the file at `path` at `url`, replacing any blob there, and return the new ETag. The
    blob is committed whole: a reader gets the old one or this one."""
    location = parse_blob_url(url)
    with _reported(location, role=_WRITER), _service(location) as service, open(path, "rb") as source:
        blob = service.get_blob_client(location.container, location.name)
        result = blob.upload_blob(
            source,
            length=os.fstat(source.fileno()).st_size,
            overwrite=True,
            max_concurrency=_PARALLEL,
            content_settings=ContentSettings(content_type="application/octet-stream"),
        )
        return str(result["etag"])


def delete_if_present(url: str) -> bool:
    """Delete the blob at `url`; False when there was none."""
    location = parse_blob_url(url)
    with _reported(location, role=_WRITER), _service(location) as service:
        try:
            service.get_blob_client(location.container, location.name).delete_blob()
        except ResourceNotFoundError:
            return False
        return True


def check_writable(url: str) -> None:
    """`BlobStorageError` saying what to change unless the container of `url` exists and the
    identity Anvil signs in as may write the blob there. It writes nothing anyone reads: one block
    staged and never committed, which storage discards at the blob's next upload (or within a
    week); the blob itself, its content and its ETag, are untouched."""
    location = parse_blob_url(url)
    with _reported(location, role=_WRITER), _service(location) as service:
        service.get_blob_client(location.container, location.name).stage_block(_PROBE_BLOCK, b"\0")


def documents_size(url_prefix: str, suffixes: Sequence[str], max_bytes: int) -> int:
    """How many bytes the blobs `read_documents` reads under `url_prefix` hold (one listing)."""
    location = parse_blob_url(url_prefix, prefix=True)
    ends = tuple(suffixes)
    with _reported(location), _service(location) as service:
        container = service.get_container_client(location.container)
        sizes = (
            int(blob.size or 0)
            for blob in container.list_blobs(name_starts_with=location.name or None)
            if blob.name.endswith(ends)
        )
        return sum(size for size in sizes if size <= max_bytes)


def read_documents(
    url_prefix: str,
    suffixes: Sequence[str],
    *,
    max_bytes: int | None = None,
    too_large: Callable[[int], str] = lambda size: f"it is {size:,} bytes, more than the most read",
) -> list[tuple[str, bytes]]:
    """Every blob under the folder `url_prefix` whose name ends with one of `suffixes`, as (its
    name below the folder, its bytes), sorted by name. A blob deleted between the listing and
    its reading is skipped with a warning, and so is one larger than `max_bytes` (if given),
    without being downloaded (`too_large(size)` says why)."""
    location = parse_blob_url(url_prefix, prefix=True)
    ends = tuple(suffixes)
    found: list[tuple[str, bytes]] = []
    with _reported(location), _service(location) as service:
        container = service.get_container_client(location.container)
        listed = {
            blob.name: int(blob.size or 0)
            for blob in container.list_blobs(name_starts_with=location.name or None)
            if blob.name.endswith(ends)
        }
        for name, size in sorted(listed.items()):
            where = f"{location.account_url}/{location.container}/{name}"
            if max_bytes is not None and size > max_bytes:
                logger.warning("corpus: skipped %s: %s", where, too_large(size))
                continue
            try:
                data = container.download_blob(name, max_concurrency=_PARALLEL).readall()
            except ResourceNotFoundError:
                logger.warning("corpus: skipped %s: it was deleted while the folder was read", where)
                continue
            found.append((name[len(location.name) :], data))
    return found
