"""The error tree's own helpers."""

from __future__ import annotations

import email.utils
import time

from app.errors import Unavailable, busy, retry_after_seconds


def test_retry_after_is_read_in_milliseconds_seconds_or_as_a_date() -> None:
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_seconds({"retry-after": "12"}) == 12.0
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    wait = retry_after_seconds({"retry-after": date})
    assert wait is not None and 25 <= wait <= 31
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_retry_after_names_are_matched_whatever_their_case_and_cosmos_names_its_own() -> None:
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    cosmos = ("x-ms-retry-after-ms",)
    assert retry_after_seconds({"X-Ms-Retry-After-Ms": "250"}, cosmos) == 0.25
    assert retry_after_seconds({"x-ms-retry-after-ms": "soon", "retry-after": "2"}, cosmos) == 2.0


def test_a_busy_dependency_waits_what_it_asked_for_even_nothing_else_the_default() -> None:
    asked = busy("The language model", {"Retry-After": "2.5"}, 5.0)
    assert isinstance(asked, Unavailable)
    assert (asked.message, asked.retry_after) == ("The language model is busy; retry in 3 s.", 2.5)
    assert asked.headers() == {"Retry-After": "3"}
    # A wait of 0 is a wait: not the default's.
    now = busy("The embeddings endpoint", {"retry-after-ms": "0"}, 5.0)
    assert (now.message, now.retry_after) == ("The embeddings endpoint is busy; retry now.", 0.0)
    unknown = busy("The language model", {"Retry-After": "soon"}, 5.0)
    assert (unknown.message, unknown.retry_after) == ("The language model is busy; retry in 5 s.", 5.0)
