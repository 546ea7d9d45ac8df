"""Every token-shaped string scrubbed from log records before any handler writes them.

Anvil itself never logs a token, but libraries log what they are given (a tool's error text, an
exception message quoting a header), so a filter on every handler removes anything that looks
like a credential: JWT-shaped strings (`eyJ...` in three or more base64url segments), the value
after `Bearer`, `access_token=`-style parameters, and Azure Storage's signatures (a SAS URL's
`sig=`, a `SharedKey account:signature` header).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[REDACTED]"

_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*){2,}")
# RFC 6750 b64token after the scheme name, also URL-encoded (`Bearer%20...`, `Bearer+...`).
_BEARER = re.compile(r"\b(bearer)(?:\s+|%20|\+)[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
_TOKEN_PARAMETER = re.compile(
    r"\b(access_token|id_token|refresh_token|client_secret)([\"']?\s*[=:]\s*[\"']?)[^\s&\"',;]+",
    re.IGNORECASE,
)
# A shared access signature's signature in a URL, and a Shared Key request signature (Azure Storage).
_SAS_SIGNATURE = re.compile(r"([?&]sig=)[^\s&\"',;]+", re.IGNORECASE)
_SHARED_KEY = re.compile(r"\b(SharedKey(?:Lite)?)\s+[^\s:]+:[A-Za-z0-9+/=%]+")


def redact(text: str) -> str:
    """`text` with every token-shaped part replaced by `[REDACTED]`."""
    text = _JWT.sub(REDACTED, text)
    text = _BEARER.sub(rf"\1 {REDACTED}", text)
    text = _SAS_SIGNATURE.sub(rf"\1{REDACTED}", text)
    text = _SHARED_KEY.sub(rf"\1 {REDACTED}", text)
    return _TOKEN_PARAMETER.sub(rf"\1\2{REDACTED}", text)


def _scrubbed(value: Any) -> Any:
    """`value` itself when it shows no token, else its text with the tokens redacted."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else str(value)
    clean = redact(text)
    if clean == text:
        return value
    return clean


class TokenRedactor(logging.Filter):
    """Scrubs token-shaped strings from a record's message, arguments, traceback and stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_clean", False):
            # Built only from values Anvil chose (the access log): nothing to scrub.
            return True
        record.msg = _scrubbed(record.msg)
        if isinstance(record.args, Mapping):
            record.args = {key: _scrubbed(value) for key, value in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(_scrubbed(value) for value in record.args)
        if record.exc_info and not record.exc_text:
            # Formatters reuse a cached exc_text, so formatting it here is what they will print.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def install_redactor(target: logging.Handler | logging.Logger) -> None:
    """Add a `TokenRedactor` to a handler or logger, once."""
    if not any(isinstance(existing, TokenRedactor) for existing in target.filters):
        target.addFilter(TokenRedactor())
