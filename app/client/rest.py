"""A small HTTP client for Anvil's REST API, as `anvil ask` uses it.

Every failure becomes one `ClientError` carrying a one-line message for a person and the exit
code the command line ends with, so a caller never sees a traceback: the server could not be
reached (3), sign-in was refused (4), the server is busy (5), or it answered with another
problem (6). Problem documents (RFC 9457) are read for their `detail`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

#: Seconds to wait for a connection: a local or healthy server accepts at once.
CONNECT_TIMEOUT = 5.0
#: Seconds to wait for the answer: a language model may take a while to write it.
ANSWER_TIMEOUT = 120.0

EXIT_UNREACHABLE = 3
EXIT_SIGN_IN_REFUSED = 4
EXIT_BUSY = 5
EXIT_PROBLEM = 6


class ClientError(Exception):
    """A request that did not produce a result: `message` is one line, `exit_code` the status."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


def ask(
    url: str,
    question: str,
    *,
    conversation_id: str | None = None,
    instructions: str | None = None,
    token: str | None = None,
    timeout: float = ANSWER_TIMEOUT,
) -> dict[str, Any]:
    """`POST {url}/api/ask` and return the answer envelope; `ClientError` for every failure."""
    body: dict[str, str] = {"question": question}
    if conversation_id is not None:
        body["conversationId"] = conversation_id
    if instructions is not None:
        body["instructions"] = instructions
    return post_json(f"{url.rstrip('/')}/api/ask", body, token=token, timeout=timeout)


def post_json(
    endpoint: str, body: Mapping[str, Any], *, token: str | None = None, timeout: float = ANSWER_TIMEOUT
) -> dict[str, Any]:
    """POST `body` as JSON to `endpoint` and return the JSON object it answers with."""
    headers = {"Accept": "application/json, application/problem+json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT)) as http:
            response = http.post(endpoint, json=dict(body), headers=headers)
    except httpx.TimeoutException as error:
        waited = CONNECT_TIMEOUT if isinstance(error, httpx.ConnectTimeout) else timeout
        raise ClientError(
            EXIT_UNREACHABLE,
            f"no answer from {endpoint} within {waited:g} s; is the server up and reachable?",
        ) from None
    except httpx.TransportError as error:
        raise ClientError(
            EXIT_UNREACHABLE,
            f"cannot reach the server at {endpoint} ({_reason(error)}); start one with `anvil serve`, "
            "or pass --url (or set ANVIL_URL)",
        ) from None
    except httpx.InvalidURL as error:
        raise ClientError(EXIT_UNREACHABLE, f"invalid server URL {endpoint}: {error}") from None
    if response.is_success:
        try:
            envelope = response.json()
        except ValueError:
            envelope = None
        if not isinstance(envelope, dict):
            raise ClientError(
                EXIT_PROBLEM, f"{endpoint} answered HTTP {response.status_code} without a JSON object"
            )
        return envelope
    raise _failure(endpoint, response)


def _failure(endpoint: str, response: httpx.Response) -> ClientError:
    """The `ClientError` for a response that is not a success."""
    status = response.status_code
    detail = problem_detail(response)
    if status in (401, 403):
        said = f": {detail}" if detail else ""
        return ClientError(
            EXIT_SIGN_IN_REFUSED,
            f"sign-in was refused (HTTP {status}{said}); pass a token the server accepts with --token or "
            "ANVIL_TOKEN, or for a local dev server run with the server's ANVIL_DATA_DIR",
        )
    if status in (429, 503):
        retry = retry_after(response)
        wait = f"; retry in {retry} s" if retry is not None else "; retry later"
        return ClientError(EXIT_BUSY, f"the server is busy (HTTP {status}: {detail or 'unavailable'}){wait}")
    if detail:
        return ClientError(EXIT_PROBLEM, f"HTTP {status}: {detail}")
    kind = response.headers.get("content-type", "no content type").split(";")[0]
    return ClientError(EXIT_PROBLEM, f"{endpoint} answered HTTP {status} ({kind}); is this an Anvil server?")


def problem_detail(response: httpx.Response) -> str | None:
    """The `detail` (else `title`) of a problem document, on one line; None for any other body."""
    try:
        document = json.loads(response.content)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    for key in ("detail", "title"):
        value = document.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())
    return None


def retry_after(response: httpx.Response) -> int | None:
    """The `Retry-After` header in whole seconds, when it is given as seconds."""
    value = response.headers.get("retry-after", "").strip()
    return int(value) if value.isdigit() else None


def _reason(error: httpx.TransportError) -> str:
    """A short reason for a failed connection, without the exception's nested chain."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
