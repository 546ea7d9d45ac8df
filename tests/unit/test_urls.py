"""The one URL check (`app.urls.checked_url`) and what counts as loopback."""

from __future__ import annotations

import pytest

from app.urls import checked_url, is_loopback


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.0.0.2", "::1", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.1", "example.com", "localhost.example.com", ""])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://host", "https://host"),
        ("http://host:8000/", "http://host:8000"),
        ("https://host/base//", "https://host/base"),
        ("http://[::1]:9000", "http://[::1]:9000"),
    ],
)
def test_an_absolute_http_url_comes_back_without_its_trailing_slash(url: str, expected: str) -> None:
    assert checked_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "ftp://host",
        "host",
        "/mcp",
        "https://",
        "http://:80",
        "http://host:0",
        "http://host:port",
        "http://[::1",
    ],
)
def test_anything_else_is_refused_saying_what_is_expected(url: str) -> None:
    with pytest.raises(ValueError) as refused:
        checked_url(url, example="https://anvil.example")
    assert (
        str(refused.value)
        == "must be an absolute http(s) URL without query or fragment, e.g. https://anvil.example"
    )


@pytest.mark.parametrize("url", ["https://host/?q=1", "https://host/#top"])
def test_a_base_url_has_no_query_or_fragment_unless_allowed(url: str) -> None:
    with pytest.raises(ValueError, match="without query or fragment"):
        checked_url(url)
    assert checked_url(url, bare=False) == url


def test_https_only_allows_plain_http_for_loopback_alone() -> None:
    assert checked_url("http://127.0.0.1:8400/", https=True) == "http://127.0.0.1:8400"
    assert checked_url("https://login.example", https=True) == "https://login.example"
    with pytest.raises(ValueError) as refused:
        checked_url("http://login.example", https=True)
    assert str(refused.value) == "must use https (plain http only for a loopback address), e.g. https://host"
    with pytest.raises(ValueError, match="must be an absolute https URL"):
        checked_url("file:///etc/keys", https=True)
