"""What a failed Cosmos DB request becomes: `Unavailable` with a retry hint when it was busy, else
`StoreFailed` naming its cause and what the operator does about it; messages carry the status
only (never the request, its headers or the account key)."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from app.errors import StoreFailed, Unavailable, retry_after_seconds

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

#: Retry hint when Cosmos DB gives none, in seconds.
DEFAULT_RETRY_AFTER = 1.0


async def send(request: Awaitable[_T], *expected: type[Exception]) -> _T:
    """Await one SDK call; errors of the `expected` classes pass through, others are `Unavailable`.

    The SDK has already retried what it retries (throttling within the budget, a 503 once).
    """
    from azure.core.exceptions import AzureError
    from azure.cosmos.exceptions import CosmosHttpResponseError

    try:
        return await request
    except expected:
        raise
    except CosmosHttpResponseError as error:
        raise unavailable_for(
            error.status_code, error.headers or {}, getattr(error, "sub_status", None)
        ) from None
    except AzureError as error:
        # Connection refused or reset, DNS, timeouts, a credential that cannot get a token.
        logger.warning("Cosmos DB request failed: %s", type(error).__name__)
        raise StoreFailed(
            "The conversation store cannot be reached; retry shortly.",
            cause="unreachable",
            remedy=(
                f"check ANVIL_COSMOS_ENDPOINT, the network to it and Anvil's credential "
                f"(the request failed with {type(error).__name__})"
            ),
            retry_after=DEFAULT_RETRY_AFTER,
        ) from None


def unavailable_for(status: int | None, headers: Mapping[str, str], sub_status: Any = None) -> Unavailable:
    """The retryable error for a Cosmos DB failure the SDK gave up on (throttling retries included)."""
    logger.warning(
        "Cosmos DB request failed: HTTP %s substatus %s activity %s",
        status,
        sub_status,
        # SDK errors carry a case-insensitive mapping of headers.
        headers.get("x-ms-activity-id"),
    )
    retry_after = retry_after_seconds(headers, ("x-ms-retry-after-ms",))
    if retry_after is None:
        retry_after = DEFAULT_RETRY_AFTER
    wait = max(1, math.ceil(retry_after))
    if status in (429, 503):
        return Unavailable(f"The conversation store is busy; retry in {wait} s.", retry_after=retry_after)
    if status in (401, 403):
        return StoreFailed(
            "The conversation store refused Anvil's credentials; the operator must grant access. "
            "Retry later.",
            cause="credentials",
            remedy=(
                "grant Anvil's identity the Cosmos DB Built-in Data Contributor role on the "
                "container, or check ANVIL_COSMOS_KEY"
            ),
            retry_after=None,
        )
    return StoreFailed(
        f"The conversation store failed (HTTP {status}); retry in {wait} s.",
        cause=f"http-{status}",
        remedy="see the Cosmos DB account's health and its diagnostic logs for the activity id logged",
        retry_after=retry_after,
    )
