"""What every part of the settings shares: the base model and the list type."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_settings import NoDecode

LIST_FORMS = 'the values separated by commas (one,two) or a JSON list of strings (["one","two"])'
#: No value of a list setting (a Host, an Origin, a scope, a tenant id) holds a quote, a comma or
#: a space: one that does is a quoted or space-separated list read as one value, matching nothing.
_NOT_IN_LIST_VALUES = re.compile(r"[\s\"',]")


class Part(BaseModel):
    """A part of `Settings`: the fields (and the checks) of one component.

    `Settings` inherits every part, so the environment variables stay flat (`ANVIL_<FIELD>`) and
    a factory annotated with its part can read nothing else. A part also validates on its own,
    for a test that needs only that component's settings.
    """

    model_config = ConfigDict(frozen=True)


def _starts_with_ipv6_host(text: str) -> bool:
    """Whether `text` starts with a bracketed IPv6 address, as the Host `[::1]:8000` does."""
    end = text.find("]")
    if end < 0:
        return False
    try:
        ipaddress.IPv6Address(text[1:end])
    except ValueError:
        return False
    return True


def parse_list(value: object) -> object:
    """The values of a list setting given as text: comma-separated, or a JSON list of strings.

    Text starting with `[` is taken for JSON, unless it starts with a bracketed IPv6 address (a
    Host value), so a list in another form stops start-up instead of being read as values that
    match nothing. Values that are already a list (from Python) are left to the type check.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("[") and not _starts_with_ipv6_host(text):
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if not isinstance(decoded, list) or not all(isinstance(item, str) for item in decoded):
            raise ValueError(f"starts with '[' but is not a JSON list of strings; write {LIST_FORMS}")
        items = [item.strip() for item in decoded]
        if not all(items):
            raise ValueError(f"the JSON list holds an empty string; write {LIST_FORMS}")
    else:
        items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if _NOT_IN_LIST_VALUES.search(item):
            raise ValueError(f"the value {item!r} holds a quote, a comma or a space; write {LIST_FORMS}")
    return items


#: A list setting: `NoDecode` hands `parse_list` the variable's text as it is.
CommaList = Annotated[list[str], NoDecode, BeforeValidator(parse_list)]
