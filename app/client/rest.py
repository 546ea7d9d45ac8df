"""A small HTTP client for Anvil's REST API, as `anvil ask` uses it.

Every failure becomes one `ClientError` (`app.client.errors`, with the exit codes), so a caller
never sees a traceback: the server could not be reached, sign-in was refused, the server is busy,
or it answered with another problem. Problem documents (RFC 9457) are read for their `detail`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import httpx

from app.client.errors import EXIT_BUSY, EXIT_PROBLEM, EXIT_SIGN_IN, EXIT_UNREACHABLE, ClientError
from app.errors import retry_after_seconds

#: Seconds to wait for a connection: a local or healthy server accepts at once.
CONNECT_TIMEOUT = 5.0
#: Seconds to wait for the answer: a language model may take a while to write it.
ANSWER_TIMEOUT = 120.0


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
            f"no answer from {endpoint} within {waited:g} s; is the server up and reachable?",
            EXIT_UNREACHABLE,
        ) from None
    except httpx.TransportError as error:
        raise ClientError(
            f"cannot reach the server at {endpoint} ({_reason(error)}); start one with `anvil serve`, "
            "or pass --url (or set ANVIL_URL)",
            EXIT_UNREACHABLE,
        ) from None
    except httpx.InvalidURL as error:
        raise ClientError(f"invalid server URL {endpoint}: {error}", EXIT_UNREACHABLE) from None
    if response.is_success:
        try:
            envelope = response.json()
        except ValueError:
            envelope = None
        if not isinstance(envelope, dict):
            raise ClientError(
                f"{endpoint} answered HTTP {response.status_code} without a JSON object", EXIT_PROBLEM
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
            f"sign-in was refused (HTTP {status}{said}); pass a token the server accepts with --token or "
            "ANVIL_TOKEN, or for a local dev server run with the server's ANVIL_DATA_DIR",
            EXIT_SIGN_IN,
        )
    if status in (429, 503):
        retry = retry_after_seconds(response.headers)
        wait = f"; retry in {math.ceil(retry)} s" if retry is not None else "; retry later"
        return ClientError(f"the server is busy (HTTP {status}: {detail or 'unavailable'}){wait}", EXIT_BUSY)
    if detail:
        return ClientError(f"HTTP {status}: {detail}", EXIT_PROBLEM)
    kind = response.headers.get("content-type", "no content type").split(";")[0]
    return ClientError(f"{endpoint} answered HTTP {status} ({kind}); is this an Anvil server?", EXIT_PROBLEM)


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


def _reason(error: httpx.TransportError) -> str:
    """A short reason for a failed connection, without the exception's nested chain."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def render_answer(envelope: Mapping[str, Any]) -> str:
    """The answer, its sources (`- file (heading; other heading)`, a page a line) and the
    conversation turn, as plain text."""
    parts = [str(envelope.get("answer", "")).rstrip()]
    sources = [s for s in envelope.get("sources") or [] if isinstance(s, dict)]
    if sources:
        lines = []
        for source in sources:
            sections = [str(s.get("heading")) for s in source.get("sections") or [] if isinstance(s, dict)]
            headings = "; ".join(sections) or source.get("heading")
            lines.append(
                f"- {source.get('source')} ({headings})" if headings else f"- {source.get('source')}"
            )
        parts.append("Sources:\n" + "\n".join(lines))
    if envelope.get("conversationId"):
        parts.append(f"(conversation {envelope['conversationId']}, turn {envelope.get('turn')})")
    return "\n\n".join(parts)
