"""A conversation store in an Azure Cosmos DB for NoSQL container (partition key `/oid`).

One item per conversation: `to_document(conversation)` plus a per-item `ttl`, under
`id = mcp:{oid}:{conversationId}`, in the partition of its owner. A turn costs one point read
(`get`) and one conditional write (`replace` with the ETag that read returned). The Azure SDK
is imported by the methods that call it, so other stores never load it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from app.adapters.stores.codec import from_document, to_document
from app.adapters.stores.cursor import decode_cursor, encode_cursor
from app.domain.conversation import Conversation, ConversationPage, ConversationSummary, conversation_key
from app.errors import InvalidInput, Unavailable
from app.ports import Stored, VersionConflict

if TYPE_CHECKING:
    from app.settings import Settings

_T = TypeVar("_T")
# Aliases, because `CosmosStore.list` hides the builtin inside the class.
_Rows = list[dict[str, Any]]
_Parameters = list[dict[str, Any]]

logger = logging.getLogger(__name__)

#: Largest item written, in bytes of the JSON the SDK sends. Cosmos DB refuses items over 2 MB;
#: the history bounds keep conversations near 256 KiB, so this only stops a misconfiguration.
MAX_ITEM_BYTES = 1_500_000
#: Deletes `delete_all` keeps in flight at once.
DELETE_CONCURRENCY = 8
#: Retry hint when Cosmos DB gives none, in seconds.
DEFAULT_RETRY_AFTER = 1.0

# Writes pay request units for every indexed path: only the fields queries filter or sort on
# are indexed, never the turns. Used when the store creates the container itself.
INDEXING_POLICY: dict[str, Any] = {
    "indexingMode": "consistent",
    "automatic": True,
    "includedPaths": [
        {"path": "/oid/?"},
        {"path": "/tid/?"},
        {"path": "/conversationId/?"},
        {"path": "/updatedAt/?"},
        {"path": "/expiresAt/?"},
    ],
    "excludedPaths": [{"path": "/*"}],
}

# Newest first; Cosmos DB orders by one field without a composite index, so ties on updatedAt
# are ordered by conversationId here, and the cursor is a (updatedAt, conversationId) keyset.
_SUMMARY = "c.conversationId, c.title, c.turnCount, c.updatedAt, c.expiresAt"
_LIVE = "c.oid = @oid AND c.tid = @tid AND c.expiresAt > @now"
_AFTER = "(c.updatedAt < @updatedAt OR (c.updatedAt = @updatedAt AND c.conversationId > @after))"
_SYSTEM_PREFIX = "_"
_TOKEN_SEPARATOR = "/"


class CosmosStore:
    """`ConversationStore` in Cosmos DB. Open with `await CosmosStore.open(settings)`.

    Optimistic concurrency uses Cosmos DB's ETags: `replace` writes with `IfNotModified` and
    the ETag of the version the caller read, so of two writers from one version exactly one
    wins, in one process or many. The ETag this store hands out also names the expiry of that
    version (`{expiresAt}/{_etag}`): Cosmos DB purges by its own clock and only some time after
    `expiresAt`, so the store must tell an expired version from a live one without reading it.
    """

    def __init__(
        self,
        container: Any,
        *,
        clock: Callable[[], float] = time.time,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Wrap an opened `azure.cosmos.aio` container proxy; `close` releases its client."""
        self._container = container
        self._clock = clock
        self._close = close
        #: Keyword arguments every data request gets: the request-charge hook, once observed.
        self._hooks: dict[str, Any] = {}

    def observe_request_charges(self, callback: Callable[[float], None]) -> None:
        """Call `callback` with the request units of every data request (each page of a query),
        from the response's `x-ms-request-charge`, through the SDK's `response_hook`."""

        def hook(headers: Mapping[str, Any], _: object) -> None:
            charge = headers.get("x-ms-request-charge")
            if charge is not None:
                callback(float(charge))

        self._hooks = {"response_hook": hook}

    @classmethod
    async def open(cls, settings: Settings, clock: Callable[[], float] = time.time) -> CosmosStore:
        """Connect to the configured container, creating it first when the settings ask.

        Key auth when `cosmos_key` is set, else `DefaultAzureCredential` (managed identity in
        Azure). Throttled requests are retried by the SDK within the configured budget. Fails
        with one clear line when the container is missing or not partitioned by `/oid`.
        """
        from azure.cosmos import PartitionKey
        from azure.cosmos.aio import CosmosClient

        if not settings.cosmos_endpoint:
            raise RuntimeError("ANVIL_STORE=cosmos needs ANVIL_COSMOS_ENDPOINT")
        credential: Any
        close_credential: Callable[[], Awaitable[None]] | None = None
        if settings.cosmos_key is not None:
            credential = settings.cosmos_key.get_secret_value()
        else:
            from azure.identity.aio import DefaultAzureCredential

            credential = DefaultAzureCredential()
            close_credential = credential.close
        # The SDK logs every request and its headers at INFO; keep that for ANVIL_LOG_LEVEL=debug.
        requests_logger = logging.getLogger(f"{__name__}.requests")
        requests_logger.setLevel(logging.DEBUG if settings.log_level == "debug" else logging.WARNING)
        client = CosmosClient(
            settings.cosmos_endpoint,
            credential,
            connection_policy=_connection_policy(settings),
            logger=requests_logger,
        )

        async def close() -> None:
            try:
                await client.close()
            finally:
                if close_credential is not None:
                    await close_credential()

        try:
            if settings.cosmos_create_if_missing:
                database = await _send(client.create_database_if_not_exists(settings.cosmos_database))
                container = await _send(
                    database.create_container_if_not_exists(
                        settings.cosmos_container,
                        partition_key=PartitionKey(path="/oid"),
                        # Items carry their own `ttl`; only a container default turns TTL on.
                        default_ttl=settings.history_ttl_seconds,
                        indexing_policy=INDEXING_POLICY,
                    )
                )
            else:
                database = client.get_database_client(settings.cosmos_database)
                container = database.get_container_client(settings.cosmos_container)
            store = cls(container, clock=clock, close=close)
            await store._check_container(settings)
        except BaseException:
            await close()
            raise
        return store

    async def get(self, oid: str, conversation_id: str) -> Stored | None:
        """The live conversation under this key and its ETag, or None: one point read."""
        document = await self._read(oid, conversation_key(oid, conversation_id))
        if document is None:
            return None
        conversation = from_document(document)
        # Cosmos DB purges expired items in the background; until it does they read as missing.
        if conversation.is_expired(self._clock()):
            return None
        return Stored(conversation, _token(conversation.expires_at, document))

    async def create(self, conversation: Conversation) -> str:
        """Store a new conversation and return its ETag; `VersionConflict` if a live one has its key."""
        from azure.cosmos.exceptions import CosmosResourceExistsError

        c = conversation
        body = self._body(c)
        try:
            written = await _send(
                self._container.create_item(body=body, **self._hooks), CosmosResourceExistsError
            )
        except CosmosResourceExistsError:
            existing = await self._read(c.oid, c.key)
            if existing is None:
                raise VersionConflict(c.key) from None
            if _same_item(existing, body):
                # Our own write, applied although its response was lost and the SDK retried it.
                return _token(c.expires_at, existing)
            if not from_document(existing).is_expired(self._clock()):
                raise VersionConflict(c.key) from None
            written = await self._write_over(c.oid, c.key, body, str(existing["_etag"]))
        return _token(c.expires_at, written)

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        """Overwrite the stored conversation if it still carries `if_match`; returns the new ETag.

        One conditional write. `VersionConflict` when the stored conversation changed, is gone,
        or had expired by now (told by the ETag alone, as Cosmos DB may not have purged it yet).
        """
        c = conversation
        read = _parse_token(if_match)
        if read is None or read[0] <= self._clock():
            raise VersionConflict(c.key)
        written = await self._write_over(c.oid, c.key, self._body(c), read[1])
        return _token(c.expires_at, written)

    async def delete(self, oid: str, conversation_id: str, *, if_match: str | None = None) -> bool:
        """Remove a conversation; True if a live one was removed (an expired one goes silently).

        With `if_match` (the ETag of a read that found it live), one conditional delete; else
        a point read first, because an expired item may still be there and must count as
        nothing removed.
        """
        from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

        key = conversation_key(oid, conversation_id)
        read = _parse_token(if_match) if if_match is not None else None
        if read is None:
            document = await self._read(oid, key)
            if document is None:
                return False
            read = (float(document["expiresAt"]), str(document["_etag"]))
        expires_at, etag = read
        try:
            await self._delete(oid, key, etag=etag)
        except CosmosResourceNotFoundError:
            return False
        except CosmosAccessConditionFailedError:
            # Rewritten since it was read, and a write always leaves a live conversation.
            try:
                await self._delete(oid, key)
            except CosmosResourceNotFoundError:
                return False
            return True
        return expires_at > self._clock()

    async def list(self, oid: str, tid: str, *, limit: int, cursor: str | None = None) -> ConversationPage:
        """The user's live conversations, newest first, one page of at most `limit`: one query."""
        position = decode_cursor(cursor) if cursor is not None else None
        if limit < 1:
            return ConversationPage((), None)
        now = self._clock()
        where = _LIVE
        parameters: _Parameters = [
            {"name": "@oid", "value": oid},
            {"name": "@tid", "value": tid},
            {"name": "@now", "value": now},
        ]
        if position is not None:
            where += f" AND {_AFTER}"
            parameters += [
                {"name": "@updatedAt", "value": position[0]},
                {"name": "@after", "value": position[1]},
            ]
        fetch = limit + 1
        rows = await self._query(
            oid,
            f"SELECT TOP {fetch} {_SUMMARY} FROM c WHERE {where} ORDER BY c.updatedAt DESC",
            parameters,
        )
        rows.sort(key=_newest_first)
        if len(rows) == fetch and rows[limit - 1]["updatedAt"] == rows[-1]["updatedAt"]:
            # TOP may have cut a run of equal updatedAt values anywhere; fetch the whole run so
            # the page ends on the right conversationId.
            boundary = rows[-1]["updatedAt"]
            run = await self._query(
                oid,
                f"SELECT {_SUMMARY} FROM c WHERE {where} AND c.updatedAt = @boundary",
                [*parameters, {"name": "@boundary", "value": boundary}],
            )
            rows = [r for r in rows if r["updatedAt"] != boundary] + run
            rows.sort(key=_newest_first)
        page = tuple(_summary(r) for r in rows[:limit])
        more = len(rows) > limit
        return ConversationPage(page, encode_cursor(page[-1]) if more and page else None)

    async def count(self, oid: str, tid: str) -> int:
        """How many live conversations the user has in the tenant: one query in their partition."""
        parameters: _Parameters = [
            {"name": "@oid", "value": oid},
            {"name": "@tid", "value": tid},
            {"name": "@now", "value": self._clock()},
        ]
        query = f"SELECT VALUE COUNT(1) FROM c WHERE {_LIVE}"

        async def collect() -> int:
            items = self._container.query_items(
                query=query, parameters=parameters, partition_key=oid, **self._hooks
            )
            return sum([int(value) async for value in items])

        return await _send(collect())

    async def delete_all(self, oid: str, tid: str) -> int:
        """Remove every conversation of the user; returns how many live ones were removed.

        One query for the ids in the user's partition, then one delete per item. If some
        delete fails, the others still run and the failure (`Unavailable`) is raised.
        """
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        now = self._clock()
        rows = await self._query(
            oid,
            "SELECT c.id, c.expiresAt FROM c WHERE c.oid = @oid AND c.tid = @tid",
            [{"name": "@oid", "value": oid}, {"name": "@tid", "value": tid}],
        )
        gate = asyncio.Semaphore(DELETE_CONCURRENCY)

        async def remove(row: Mapping[str, Any]) -> bool:
            async with gate:
                try:
                    await self._delete(oid, str(row["id"]))
                except CosmosResourceNotFoundError:
                    return False
            return float(row["expiresAt"]) > now

        # Every delete runs to its end even if another fails, so a retry has less left to do.
        results = await asyncio.gather(*(remove(row) for row in rows), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return sum(result is True for result in results)

    async def check(self) -> None:
        """Raise `Unavailable` unless the container's properties can be read (one cheap request)."""
        # No connection retries: a readiness probe is repeated anyway, and must answer before
        # its own timeout (the SDK otherwise spends about 2 s retrying a refused connection).
        await _send(self._container.read(retry_connect=0))

    async def aclose(self) -> None:
        """Close the client (and the credential it used); later calls do nothing."""
        close, self._close = self._close, None
        if close is not None:
            await close()

    async def _check_container(self, settings: Settings) -> None:
        """Refuse to start on a missing container or one partitioned by another path."""
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        name = f"{settings.cosmos_database}/{settings.cosmos_container}"
        try:
            properties = await _send(self._container.read(), CosmosResourceNotFoundError)
        except CosmosResourceNotFoundError:
            raise RuntimeError(
                f"Cosmos DB container {name} does not exist: create it with partition key /oid "
                "(Terraform does), or set ANVIL_COSMOS_CREATE_IF_MISSING=true for local runs"
            ) from None
        except Unavailable as error:
            # Not reachable yet: start anyway; /readyz reports it until Cosmos DB answers.
            logger.warning("Cosmos DB container %s not reachable at start-up: %s", name, error.message)
            return
        paths = (properties.get("partitionKey") or {}).get("paths") or []
        if paths != ["/oid"]:
            raise RuntimeError(f"Cosmos DB container {name} must have partition key /oid (it has {paths})")

    async def _read(self, oid: str, key: str) -> dict[str, Any] | None:
        """One point read; None when the item is missing."""
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        try:
            document: dict[str, Any] = await _send(
                self._container.read_item(item=key, partition_key=oid, **self._hooks),
                CosmosResourceNotFoundError,
            )
        except CosmosResourceNotFoundError:
            return None
        return document

    async def _write_over(self, oid: str, key: str, body: dict[str, Any], etag: str) -> dict[str, Any]:
        """Replace the item if it still has `etag`; `VersionConflict` if it changed or vanished."""
        from azure.core import MatchConditions
        from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

        try:
            written: dict[str, Any] = await _send(
                self._container.replace_item(
                    item=key,
                    body=body,
                    etag=etag,
                    match_condition=MatchConditions.IfNotModified,
                    **self._hooks,
                ),
                CosmosResourceNotFoundError,
                CosmosAccessConditionFailedError,
            )
        except CosmosAccessConditionFailedError:
            # The SDK retries a write once after a 503; if the first attempt was applied, the
            # retry finds our own write and fails its precondition.
            current = await self._read(oid, key)
            if current is not None and _same_item(current, body):
                return current
            raise VersionConflict(key) from None
        except CosmosResourceNotFoundError:
            raise VersionConflict(key) from None
        return written

    async def _delete(self, oid: str, key: str, etag: str | None = None) -> None:
        """Delete the item (only if it still has `etag`, when given); SDK errors for 404 and 412."""
        from azure.core import MatchConditions
        from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

        conditions: dict[str, Any] = {}
        if etag is not None:
            conditions = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
        await _send(
            self._container.delete_item(item=key, partition_key=oid, **conditions, **self._hooks),
            CosmosResourceNotFoundError,
            CosmosAccessConditionFailedError,
        )

    async def _query(self, oid: str, query: str, parameters: _Parameters) -> _Rows:
        """Every row of a query scoped to the user's partition."""

        async def collect() -> _Rows:
            items = self._container.query_items(
                query=query, parameters=parameters, partition_key=oid, **self._hooks
            )
            return [dict(item) async for item in items]

        return await _send(collect())

    def _body(self, conversation: Conversation) -> dict[str, Any]:
        """The item to write: the codec's document plus a `ttl` that lets Cosmos DB purge it."""
        body = to_document(conversation)
        # Rounded up so Cosmos DB never purges a conversation the store still counts as live.
        body["ttl"] = max(1, math.ceil(conversation.expires_at - self._clock()))
        size = len(json.dumps(body, separators=(",", ":")))
        if size > MAX_ITEM_BYTES:
            raise InvalidInput(
                f"Conversation {conversation.conversation_id!r} is too large to store ({size} bytes; the "
                f"limit is {MAX_ITEM_BYTES}): start a new conversation, or ask the operator to lower "
                "ANVIL_HISTORY_MAX_BYTES."
            )
        return body


def _token(expires_at: float, document: Mapping[str, Any]) -> str:
    """The ETag handed to callers: the version's expiry and Cosmos DB's `_etag` for it."""
    return f"{expires_at!r}{_TOKEN_SEPARATOR}{document['_etag']}"


def _parse_token(token: str) -> tuple[float, str] | None:
    """`(expiresAt, _etag)` from an ETag this store handed out; None for any other string."""
    expires_at, separator, etag = token.partition(_TOKEN_SEPARATOR)
    if not separator or not etag:
        return None
    try:
        return float(expires_at), etag
    except ValueError:
        return None


def _connection_policy(settings: Settings) -> Any:
    """The SDK's connection policy with the configured budget for throttled (429) requests."""
    from azure.cosmos import documents

    policy = documents.ConnectionPolicy()
    # Set as an object, not with the `retry_throttle_*` keywords: the SDK reads a keyword of 0
    # as "use the default", and 0 retries is a valid setting. `RetryOptions` is the class the
    # policy documents for this attribute; the module just does not re-export it. The wait is
    # typed int but only ever multiplied by 1000, so fractions of a second work.
    policy.RetryOptions = documents.RetryOptions(  # type: ignore[attr-defined]
        max_retry_attempt_count=settings.cosmos_throttle_retries,
        max_wait_time_in_seconds=settings.cosmos_throttle_wait_seconds,  # type: ignore[arg-type]
    )
    return policy


async def _send(request: Awaitable[_T], *expected: type[Exception]) -> _T:
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
        raise _unavailable_for(
            error.status_code, error.headers or {}, getattr(error, "sub_status", None)
        ) from None
    except AzureError as error:
        # Connection refused or reset, DNS, timeouts, a credential that cannot get a token.
        logger.warning("Cosmos DB request failed: %s", type(error).__name__)
        raise Unavailable(
            "The conversation store cannot be reached; retry shortly.", retry_after=DEFAULT_RETRY_AFTER
        ) from None


def _unavailable_for(status: int | None, headers: Mapping[str, str], sub_status: Any = None) -> Unavailable:
    """The retryable error for a Cosmos DB failure the SDK gave up on (throttling retries included).

    The message carries the status only: never the request, its headers or the account key.
    """
    logger.warning(
        "Cosmos DB request failed: HTTP %s substatus %s activity %s",
        status,
        sub_status,
        _header(headers, "x-ms-activity-id"),
    )
    retry_after = _retry_after(headers)
    wait = max(1, math.ceil(retry_after))
    if status in (429, 503):
        return Unavailable(f"The conversation store is busy; retry in {wait} s.", retry_after=retry_after)
    if status in (401, 403):
        return Unavailable(
            "The conversation store refused Anvil's credentials; the operator must grant access. "
            "Retry later.",
            retry_after=None,
        )
    return Unavailable(
        f"The conversation store failed (HTTP {status}); retry in {wait} s.", retry_after=retry_after
    )


def _retry_after(headers: Mapping[str, str]) -> float:
    """Seconds Cosmos DB asked to wait (`x-ms-retry-after-ms`, else `Retry-After`), or the default."""
    for name, scale in (("x-ms-retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = _header(headers, name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        if seconds > 0:
            return seconds
    return DEFAULT_RETRY_AFTER


def _header(headers: Mapping[str, str], name: str) -> str | None:
    # SDK errors carry a case-insensitive mapping, but tests and other callers may not.
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _same_item(stored: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """Whether `stored` is exactly `body` as written (system properties aside)."""
    return {k: v for k, v in stored.items() if not k.startswith(_SYSTEM_PREFIX)} == dict(body)


def _newest_first(row: Mapping[str, Any]) -> tuple[float, str]:
    return (-float(row["updatedAt"]), str(row["conversationId"]))


def _summary(row: Mapping[str, Any]) -> ConversationSummary:
    return ConversationSummary(
        str(row["conversationId"]),
        row.get("title"),
        int(row.get("turnCount") or 0),
        float(row["updatedAt"]),
        float(row["expiresAt"]),
    )
