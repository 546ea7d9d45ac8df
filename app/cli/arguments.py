"""The types of the `anvil` command line's arguments: each refuses a bad value with a usage
error that says what to give instead."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.knowledge.build import Source

#: Where `anvil ask`, `bridge`, `login` and `logout` find a server by default.
DEFAULT_URL = "http://127.0.0.1:8000"


def conversation_id(value: str) -> str:
    """argparse type: a valid conversationId, else a usage error naming the rule."""
    from app.domain.conversation import CONVERSATION_ID_RULE, is_valid_conversation_id

    if not is_valid_conversation_id(value):
        raise argparse.ArgumentTypeError(CONVERSATION_ID_RULE)
    return value


def server_url(value: str) -> str:
    """argparse type: an http(s) URL with a host, without a trailing slash."""
    from app.urls import checked_url

    try:
        return checked_url(value, bare=False)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an http(s) URL like {DEFAULT_URL}") from None


def port(value: str) -> int:
    """argparse type: a TCP port, 1 to 65535."""
    number = int(value) if value.isdigit() else 0
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port: give a number from 1 to 65535")
    return number


def ttl(value: str) -> int:
    """argparse type: a token lifetime in whole seconds, from 1 second to 30 days."""
    from app.devkey import MAX_TTL_SECONDS

    try:
        seconds = int(value)
    except ValueError:
        seconds = 0
    if not 1 <= seconds <= MAX_TTL_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a lifetime from 1 second to 30 days: give whole seconds, "
            f"from 1 to {MAX_TTL_SECONDS}"
        )
    return seconds


def text_of(most: int) -> Callable[[str], str]:
    """argparse type: one line of text, not blank, at most `most` characters."""

    def checked(value: str) -> str:
        text = " ".join(value.split())
        if not text:
            raise argparse.ArgumentTypeError("it is empty: give some text")
        if len(text) > most:
            raise argparse.ArgumentTypeError(f"it is {len(text)} characters long: give at most {most}")
        return text

    return checked


def question(value: str) -> str:
    """argparse type: a question with some text in it."""
    if not value.strip():
        raise argparse.ArgumentTypeError("the question is empty")
    return value


def source_folder(value: str) -> Source:
    """argparse type: a folder of documents to index, `FOLDER` or `FOLDER=SITE` (the URL its
    pages are published at, for citations a reader can open)."""
    from app.knowledge.build import Source
    from app.urls import checked_url

    folder, equals, site = value.partition("=")
    if equals and not site.startswith(("http://", "https://")):
        folder, site = value, ""
    where: Path | str = Path(folder)
    if "://" in folder:
        from app.blob_urls import BlobStorageError, is_blob_url, parse_blob_url

        if not is_blob_url(folder):
            raise argparse.ArgumentTypeError(
                f"{folder!r} is neither a folder nor a blob URL: give a folder or "
                "https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX"
            )
        try:
            parse_blob_url(folder, prefix=True)
        except BlobStorageError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        where = folder
    elif not Path(folder).is_dir():
        raise argparse.ArgumentTypeError(f"{folder!r} is not a folder of documents")
    if not site:
        return Source(where)
    try:
        return Source(where, checked_url(site, example="https://docs.example.com/guide"))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"the site of {folder!r} {error}") from None


def site_style(value: str) -> str:
    """argparse type: the name of a site style (`sites.STYLES`)."""
    from app.knowledge.sites import style_named

    try:
        return style_named(value).name
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def index_target(value: str) -> Path | str:
    """argparse type: the file an index is written to, or the blob URL it is uploaded to."""
    from app.knowledge.resume import SUFFIX

    if value.rstrip("/").endswith(SUFFIX):
        # Where a build that stops keeps its vectors so far, removed once the index is written.
        raise argparse.ArgumentTypeError(
            f"{value!r} ends with {SUFFIX}, the name a stopped build keeps its vectors under: "
            "name it otherwise, for example docs.anvilidx"
        )
    if "://" in value:
        from app.blob_urls import BlobStorageError, is_blob_url, parse_blob_url

        if not is_blob_url(value):
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a blob URL: give https://ACCOUNT.blob.core.windows.net/CONTAINER/NAME "
                "or a file path"
            )
        try:
            parse_blob_url(value)
        except BlobStorageError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a folder: name the index file to write")
    return path
