"""List settings: comma-separated text or a JSON list of strings; anything else stops start-up
naming the setting and both forms."""

from __future__ import annotations

import os

import pytest
from pydantic import BeforeValidator, ValidationError

from app.settings import Settings, describe_error, parse_list

LIST_SETTINGS = ["allowed_hosts", "allowed_origins", "entra_required_scopes", "entra_allowed_tenants"]
TENANT = "0b6b1c9e-6a52-4f7e-9d0f-3c2a1e4b5d6f"
OTHER_TENANT = "7d3c2b1a-0f9e-4d8c-b7a6-5e4d3c2b1a09"
#: Two valid values of each list setting.
EXAMPLES = {
    "allowed_hosts": ["a.example", "b.example:*"],
    "allowed_origins": ["https://a.example", "http://localhost:3000"],
    "entra_required_scopes": ["access_as_user", "Notes.Read"],
    "entra_allowed_tenants": [TENANT, OTHER_TENANT],
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without ANVIL_ variables, whatever the shell running the tests set."""
    for name in list(os.environ):
        if name.upper().startswith("ANVIL_"):
            monkeypatch.delenv(name)


def from_environment(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> list[str]:
    monkeypatch.setenv(f"ANVIL_{name.upper()}", value)
    values: list[str] = getattr(Settings(), name)
    return values


def refusal(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> str:
    """The one line `anvil serve` would print for `ANVIL_<NAME>=value`."""
    monkeypatch.setenv(f"ANVIL_{name.upper()}", value)
    with pytest.raises(ValidationError) as refused:
        Settings()
    return describe_error(refused.value)


def test_every_list_setting_is_read_by_parse_list_and_covered_here() -> None:
    lists = {name: field for name, field in Settings.model_fields.items() if field.annotation == list[str]}
    assert sorted(lists) == sorted(LIST_SETTINGS)
    for name, field in lists.items():
        validators = [item.func for item in field.metadata if isinstance(item, BeforeValidator)]
        assert validators == [parse_list], name


@pytest.mark.parametrize("name", LIST_SETTINGS)
def test_a_json_list_reads_as_the_comma_separated_text_does(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    first, second = EXAMPLES[name]
    assert from_environment(monkeypatch, name, f"{first},{second}") == [first, second]
    assert from_environment(monkeypatch, name, f'["{first}","{second}"]') == [first, second]
    assert from_environment(monkeypatch, name, f' [ "{first}" ,\n "{second}" ] ') == [first, second]


@pytest.mark.parametrize("name", LIST_SETTINGS)
@pytest.mark.parametrize("value", ["", "[]", " [ ] ", " , ,"])
def test_an_empty_list_in_either_form_is_empty(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    assert from_environment(monkeypatch, name, value) == []


def test_a_host_starting_with_a_bracketed_ipv6_address_is_not_taken_for_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hosts = from_environment(monkeypatch, "allowed_hosts", "[::1]:8000, [fe80::1%eth0]:*,a.example")
    assert hosts == ["[::1]:8000", "[fe80::1%eth0]:*", "a.example"]
    assert from_environment(monkeypatch, "allowed_hosts", '["[::1]:8000"]') == ["[::1]:8000"]


NOT_A_JSON_LIST = "starts with '[' but is not a JSON list of strings"
QUOTE_COMMA_OR_SPACE = "holds a quote, a comma or a space"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ('["a.example","b.example"', NOT_A_JSON_LIST),  # cut short
        ("[a.example, b.example]", NOT_A_JSON_LIST),  # YAML-like, unquoted
        ("['a.example']", NOT_A_JSON_LIST),  # Python-like quotes
        ('["a.example", 1]', NOT_A_JSON_LIST),
        ('["a.example", null]', NOT_A_JSON_LIST),
        ('[["a.example"]]', NOT_A_JSON_LIST),
        ('["a.example", ""]', "the JSON list holds an empty string"),
        ('["a.example", "  "]', "the JSON list holds an empty string"),
        ('"a.example","b.example"', QUOTE_COMMA_OR_SPACE),  # quotes kept by an env file
        ("a.example b.example", QUOTE_COMMA_OR_SPACE),  # separated by spaces
        ('["a.example,b.example"]', QUOTE_COMMA_OR_SPACE),  # one JSON string holding the list
        ('{"hosts": ["a.example"]}', QUOTE_COMMA_OR_SPACE),
    ],
)
@pytest.mark.parametrize("name", LIST_SETTINGS)
def test_a_malformed_list_is_refused_naming_the_setting_and_both_forms(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, reason: str
) -> None:
    line = refusal(monkeypatch, name, value)
    assert line.startswith(f"ANVIL_{name.upper()}: ") and reason in line, line
    assert 'the values separated by commas (one,two) or a JSON list of strings (["one","two"])' in line
    assert "\n" not in line


def test_lists_given_in_python_are_taken_as_they_are() -> None:
    settings = Settings(allowed_hosts=["a.example", "b.example:*"])
    assert settings.allowed_hosts == ["a.example", "b.example:*"]
    with pytest.raises(ValidationError):
        Settings(allowed_hosts=["a.example", 1])  # type: ignore[list-item]
