"""The answer the front door (`app.serve.frontdoor`) writes itself when it refuses a request (408,
431): a problem document like every other error, with `Connection: close`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from http import HTTPStatus

from app.http.problems import problem_document


def refusal(status: int, detail: str, kind: str, default_headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The whole response, with the server's default headers (`Server`, `Date`) first."""
    phrase = HTTPStatus(status).phrase
    body = json.dumps({**problem_document(status, detail, kind), "title": phrase}).encode()
    lines = [f"HTTP/1.1 {status} {phrase}".encode()]
    lines += [name + b": " + value for name, value in default_headers]
    lines += [
        b"content-type: application/problem+json",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def seconds_text(seconds: float) -> str:
    return f"{seconds:g} second{'' if math.isclose(seconds, 1) else 's'}"
