"""The shape of a listing cursor, part of the listing contract every store keeps.

A cursor is the last listed conversation's `updated_at`, as Python writes the float, then `~`,
then its conversation id: `1767225600.123456~plan-2026`. The shape is published in the OpenAPI
document and the MCP `inputSchema` as `CURSOR_PATTERN`; `app.stores.cursor` writes and reads it.
"""

from __future__ import annotations

from app.domain.conversation import CONVERSATION_ID_PATTERN

#: `updated_at` as `repr` writes a float between 1e-99 and 1e100 (or 0): at most 17 significant
#: digits, positional below 1e16, with a two-digit exponent beyond. The exponent's `+` is left
#: out, as a query string would read it as a space. Every such text is a finite float.
_UPDATED_AT = r"-?[0-9]{1,16}(\.[0-9]{1,20})?(e-?[0-9]{2})?"
_ID = CONVERSATION_ID_PATTERN.removeprefix("^").removesuffix("$")
CURSOR_PATTERN = f"^{_UPDATED_AT}~{_ID}$"
#: The longest string `CURSOR_PATTERN` allows.
MAX_CURSOR_CHARS = len("-") + 16 + len(".") + 20 + len("e-00") + len("~") + 64
