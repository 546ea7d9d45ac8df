"""No token reaches a log line, a problem document or an error text.

The end-to-end test runs a real server at debug level, sends good, bad and expired tokens and
bearer-looking junk in headers and in tool arguments, stops the server, and scans its whole log.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.anvil_server import run_anvil
from support.entra_issuer import EntraIssuer
from support.entra_keys import signing_key
from support.jsonrpc import mcp_call

from app.telemetry.redaction import REDACTED, TokenRedactor, redact

from .calls import TENANT, bearer, entra_env, new_id, tool_result

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlLWJ5dGVz"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"token {JWT} end", f"token {REDACTED} end"),
        ("Authorization: Bearer abc123-def.ghi~jkl/+=", f"Authorization: Bearer {REDACTED}"),
        ("authorization: bearer%20opaque-value", f"authorization: bearer {REDACTED}"),
        (f"Bearer {JWT}", f"Bearer {REDACTED}"),
        ("GET /mcp?access_token=secret-value&x=1", f"GET /mcp?access_token={REDACTED}&x=1"),
        ('{"refresh_token": "r-123"}', f'{{"refresh_token": "{REDACTED}"}}'),
        ("eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.", REDACTED),
        ("nothing secret here, eyJ alone is fine", "nothing secret here, eyJ alone is fine"),
        (
            "GET https://acct.blob.core.windows.net/c/i?sv=2024-11-04&sr=b&sig=abc%2Bdef%3D&se=x",
            f"GET https://acct.blob.core.windows.net/c/i?sv=2024-11-04&sr=b&sig={REDACTED}&se=x",
        ),
        (
            "'Authorization': 'SharedKey devstoreaccount1:a2V5+/c2ln=='",
            f"'Authorization': 'SharedKey {REDACTED}'",
        ),
        ("design=compact; signature=none", "design=compact; signature=none"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def record(msg: Any, args: Any = (), exc_info: Any = None) -> logging.LogRecord:
    return logging.LogRecord("test", logging.INFO, __file__, 1, msg, args, exc_info)


def formatted(item: logging.LogRecord) -> str:
    assert TokenRedactor().filter(item) is True
    return logging.Formatter().format(item)


def test_the_filter_scrubs_message_and_positional_args() -> None:
    text = formatted(record("refused %s with %r and %d", (f"Bearer {JWT}", {"header": f"Bearer {JWT}"}, 7)))
    assert JWT not in text
    assert text.startswith("refused Bearer [REDACTED] with")
    assert text.endswith("and 7")


def test_the_filter_scrubs_mapping_args_and_non_string_messages() -> None:
    assert JWT not in formatted(record("%(token)s", ({"token": JWT},)))
    assert JWT not in formatted(record(ValueError(f"bad token {JWT}")))


def test_the_filter_scrubs_tracebacks() -> None:
    try:
        raise RuntimeError(f"upstream said Bearer {JWT}")
    except RuntimeError:
        text = formatted(record("failed", exc_info=sys.exc_info()))
    assert "RuntimeError" in text
    assert JWT not in text


def test_the_filter_leaves_clean_records_alone() -> None:
    args = ("ask", 3, None)
    item = record("tool %s took %d %s", args)
    TokenRedactor().filter(item)
    assert item.args == args


def test_no_token_reaches_the_log_or_an_error_text(issuer: EntraIssuer, tmp_path: Path) -> None:
    good = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    bad = issuer.sign(issuer.claims_v2(oid=new_id(""), tid=TENANT), key=signing_key("rogue-key"))
    expired = issuer.sign(issuer.claims_v2(oid=new_id(""), tid=TENANT, now=time.time() - 7200))
    junk = "not-a-real-token-0123456789abcdef"
    junk_jwt = "eyJqdW5rIjoxfQ.eyJqdW5rIjoyfQ.anVuay1zaWduYXR1cmU"
    secrets = [good, bad, expired, junk, junk_jwt]
    # A conversation id may be token-shaped, and tool errors quote it: the log must not.
    token_shaped_id = "eyJhbGciOiJub25lIn0.eyJ4IjoxfQ.c2lnbmF0dXJl"
    texts: list[str] = []

    env = entra_env(issuer, ANVIL_LOG_LEVEL="debug")
    with run_anvil(tmp_path / "data", env) as server:

        def keep_error_texts(response: httpx.Response) -> httpx.Response:
            """Problem documents, JSON-RPC errors and tool error texts (answers echo the question)."""
            texts.extend(f"{name}: {value}" for name, value in response.headers.items())
            body = response.json()
            result = body.get("result") or {}
            if response.status_code != 200 or "error" in body:
                texts.append(response.text)
            elif result.get("isError"):
                texts.extend(item["text"] for item in result["content"])
            return response

        def ask(arguments: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
            return keep_error_texts(mcp_call(server, "ask", arguments, headers))

        for secret in secrets:
            for headers in (
                bearer(secret),
                {"Authorization": secret},
                {"Authorization": f"Basic {secret}"},
                {"X-Access-Token": secret, "Cookie": f"access_token={secret}", **bearer(good)},
            ):
                ask({"question": "header probe"}, headers)
            keep_error_texts(
                httpx.post(f"{server.url}/api/ask?access_token={secret}", json={"question": "q"})
            )
            keep_error_texts(
                httpx.post(f"{server.url}/api/ask", json={"question": 1, "x": secret}, headers=bearer(secret))
            )

            arguments: list[dict[str, Any]] = [
                {"question": f"Authorization: Bearer {secret}"},
                {"question": "q", "conversationId": secret},
                {"question": "q", "clientRequestId": f"Bearer {secret}"},
                {"question": "q" * 8001 + secret},
                {"question": 42, "instructions": secret},
            ]
            for each in arguments:
                ask(each, bearer(good))
            search = {"searchText": f"Bearer {secret}", "maxResults": 99}
            keep_error_texts(mcp_call(server, "search", search, bearer(good)))

        # Turn 1, then instructions on the existing conversation: a tool error that quotes the
        # caller's own id (so it is not collected above), and that the SDK logs at INFO.
        first = {"question": "one", "conversationId": token_shaped_id}
        assert not tool_result(mcp_call(server, "ask", first, bearer(good)))["isError"]
        again = {**first, "instructions": "x"}
        assert tool_result(mcp_call(server, "ask", again, bearer(good)))["isError"]
    log = server.log()

    assert "tool 'ask' refused" in log, "the debug log should record tool errors"
    assert REDACTED in log, "something token-shaped should have been logged, and scrubbed"
    for secret in [*secrets, token_shaped_id]:
        assert secret not in log
    for secret in secrets:
        for text in texts:
            assert secret not in text
