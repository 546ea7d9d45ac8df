"""The one JSON decoder of request bodies, for both MCP eras and the REST API (RFC 8259).

A body is UTF-8 text holding one JSON value, and nothing else is taken: not a byte-order mark,
not another encoding (UTF-16 and UTF-32 are JSON's old alternatives, which RFC 8259 retired for
text exchanged between systems), not `NaN` or `Infinity` (not JSON at all, though Python's
decoder reads them), not nesting so deep that decoding it would exhaust the stack. Each is
refused with a reason a caller can act on, the same way whatever the era or the surface: MCP
answers -32700, REST a 400 problem document.

A text escape of a lone surrogate (`"\\ud800"`) is valid JSON and is kept: the argument models
refuse it by name (`schemas.UNENCODABLE_TEXT`). The SDK's handshake-era transport, which parses
the body again after Anvil (its public API takes no decoded message), refuses such a body
itself, with its own -32700.
"""

from __future__ import annotations

import codecs
import json
from typing import Any, NoReturn


class NotJson(ValueError):
    """The body is not one UTF-8 JSON text; the message says why."""


def decode(body: bytes) -> Any:
    """The JSON value `body` holds; `NotJson` saying what is wrong with it otherwise."""
    if body.startswith(codecs.BOM_UTF8):
        raise NotJson("the body starts with a byte-order mark; send UTF-8 JSON without one")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise NotJson("the body is not UTF-8; send JSON encoded as UTF-8") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise NotJson("the body nests too deeply") from None
    except json.JSONDecodeError as error:
        raise NotJson(str(error)) from None


def _refuse_constant(name: str) -> NoReturn:
    raise NotJson(f"{name} is not a JSON value; send numbers as JSON numbers")
