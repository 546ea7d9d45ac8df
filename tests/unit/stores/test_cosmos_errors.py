"""What a failed Cosmos DB request becomes: the wait it asks for, read whatever the case of its
headers, else the default; never more than its status in the message."""

from __future__ import annotations

import pytest

from app.stores.cosmos_errors import DEFAULT_RETRY_AFTER, unavailable_for


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"x-ms-retry-after-ms": "2500"}, 2.5),
        ({"X-Ms-Retry-After-Ms": "250"}, 0.25),
        ({"Retry-After": "3"}, 3.0),
        ({"x-ms-retry-after-ms": "500", "Retry-After": "9"}, 0.5),
        ({"x-ms-retry-after-ms": "soon"}, DEFAULT_RETRY_AFTER),
        ({}, DEFAULT_RETRY_AFTER),
    ],
)
def test_the_wait_is_the_one_asked_for_else_the_default(headers: dict[str, str], wait: float) -> None:
    assert unavailable_for(429, headers).retry_after == wait


def test_credentials_refused_give_no_wait_and_say_who_must_act() -> None:
    refused = unavailable_for(403, {"x-ms-retry-after-ms": "100"})
    assert refused.retry_after is None
    assert "operator must grant access" in refused.message


def test_the_message_names_the_status_and_the_whole_seconds_to_wait() -> None:
    assert unavailable_for(500, {"Retry-After": "1.2"}).message == (
        "The conversation store failed (HTTP 500); retry in 2 s."
    )
