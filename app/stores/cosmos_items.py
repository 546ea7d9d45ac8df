"""The Cosmos DB container's items as the store and its quota use them: one SDK request per
method, in the partition of the item's owner, with the request-charge hook once observed; errors
the caller does not expect become `Unavailable` (`cosmos_errors.send`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from app.domain.conversation import Conversation
from app.domain.ports import VersionConflict
from app.errors import InvalidInput
from app.stores.codec import to_document
from app.stores.cosmos_errors import send

#: Largest item written, in bytes of the JSON the SDK sends. Cosmos DB refuses items over 2 MB;
#: the history bounds keep conversations near 256 KiB, so this only stops a misconfiguration.
MAX_ITEM_BYTES = 1_500_000
#: Deletes kept in flight at once by one call of the store.
DELETE_CONCURRENCY = 8

_SYSTEM_PREFIX = "_"

# Aliases, because `CosmosStore.list` hides the builtin inside the store's class.
Rows = list[dict[str, Any]]
Parameters = list[dict[str, Any]]


class Items:
    """An opened `azure.cosmos.aio` container proxy, the store's clock, and the keyword
    arguments every data request gets (`hooks`: the request-charge hook, once observed)."""

    def __init__(self, container: Any, clock: Callable[[], float]) -> None:
        self.container = container
        self.clock = clock
        self.hooks: dict[str, Any] = {}

    async def read(self, oid: str, key: str) -> dict[str, Any] | None:
        """One point read; None when the item is missing."""
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        try:
            document: dict[str, Any] = await send(
                self.container.read_item(item=key, partition_key=oid, **self.hooks),
                CosmosResourceNotFoundError,
            )
        except CosmosResourceNotFoundError:
            return None
        return document

    async def write_over(self, oid: str, key: str, body: dict[str, Any], etag: str) -> dict[str, Any]:
        """Replace the item if it still has `etag`; `VersionConflict` if it changed or vanished."""
        from azure.core import MatchConditions
        from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

        try:
            written: dict[str, Any] = await send(
                self.container.replace_item(
                    item=key,
                    body=body,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                    **self.hooks,
                ),
                CosmosResourceNotFoundError,
                CosmosAccessConditionFailedError,
            )
        except CosmosAccessConditionFailedError:
            # The SDK retries a write once after a 503; if the first attempt was applied, the
            # retry finds our own write and fails its precondition.
            current = await self.read(oid, key)
            if current is not None and same_item(current, body):
                return current
            raise VersionConflict(key) from None
        except CosmosResourceNotFoundError:
            raise VersionConflict(key) from None
        return written

    async def delete(self, oid: str, key: str, etag: str | None = None) -> None:
        """Delete the item (only if it still has `etag`, when given); SDK errors for 404 and 412."""
        from azure.core import MatchConditions
        from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

        conditions: dict[str, Any] = {}
        if etag is not None:
            conditions = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
        await send(
            self.container.delete_item(item=key, partition_key=oid, **conditions, **self.hooks),
            CosmosResourceNotFoundError,
            CosmosAccessConditionFailedError,
        )

    async def empties(self, oid: str, key: str, etag: str) -> bool:
        """Whether a delete of `key` naming `etag` leaves it empty: it removed the item there or
        found none. False (412) when an item with another `_etag` is there."""
        from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

        try:
            await self.delete(oid, key, etag=etag)
        except CosmosResourceNotFoundError:
            return True
        except CosmosAccessConditionFailedError:
            return False
        return True

    async def query(self, oid: str, query: str, parameters: Parameters) -> Rows:
        """Every row of a query scoped to the user's partition."""

        async def collect() -> Rows:
            items = self.container.query_items(
                query=query, parameters=parameters, partition_key=oid, **self.hooks
            )
            return [dict(item) async for item in items]

        return await send(collect())

    def body(self, conversation: Conversation) -> dict[str, Any]:
        """The item to write: the codec's document plus a `ttl` that lets Cosmos DB purge it."""
        body = to_document(conversation)
        # Rounded up so Cosmos DB never purges a conversation the store still counts as live.
        body["ttl"] = max(1, math.ceil(conversation.expires_at - self.clock()))
        size = len(json.dumps(body, separators=(",", ":")))
        if size > MAX_ITEM_BYTES:
            raise InvalidInput(
                f"Conversation {conversation.conversation_id!r} is too large to store ({size} bytes; the "
                f"limit is {MAX_ITEM_BYTES}): start a new conversation, or ask the operator to lower "
                "ANVIL_HISTORY_MAX_BYTES."
            )
        return body


def same_item(stored: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether `stored` is exactly `body` as written (system properties aside)."""
    return {k: v for k, v in stored.items() if not k.startswith(_SYSTEM_PREFIX)} == dict(body)
