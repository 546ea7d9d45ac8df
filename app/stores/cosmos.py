"""A conversation store in an Azure Cosmos DB for NoSQL container (partition key `/oid`).

One item per conversation: `to_document(conversation)` plus a per-item `ttl`, under
`id = mcp:{oid}:{conversationId}`, in the partition of its owner. A turn costs one point read
(`get`) and one conditional write (`replace` with the ETag that read returned). Beside them, in
the same partition, one quota item per user and tenant (`id = quota:{oid}:{tid}`) makes the
per-user limit on live conversations exact (`cosmos_quota.py`). The requests themselves are
`cosmos_items.py`, what their failures become `cosmos_errors.py`. The Azure SDK is imported by
the functions that call it, so other stores never load it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from app.domain.conversation import Conversation, ConversationPage, ConversationSummary, conversation_key
from app.domain.ports import Stored, VersionConflict
from app.errors import Unavailable
from app.stores.codec import from_document
from app.stores.cosmos_errors import send
from app.stores.cosmos_items import DELETE_CONCURRENCY, Items, Parameters
from app.stores.cosmos_quota import ITEMS, claim, create_within, forget, quota_id
from app.stores.cursor import decode_cursor, encode_cursor

if TYPE_CHECKING:
    from app.settings.stores import CosmosSettings

logger = logging.getLogger(__name__)

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
    Cosmos DB gives every write a fresh `_etag`, a conversation created again after a delete
    included, and nothing read is kept between calls, so a token read before a delete never
    matches what is written after it.
    """

    def __init__(
        self,
        container: Any,
        *,
        clock: Callable[[], float] = time.time,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Wrap an opened `azure.cosmos.aio` container proxy; `close` releases its client."""
        self._items = Items(container, clock)
        self._clock = clock
        self._close = close

    def observe_request_charges(self, callback: Callable[[float], None]) -> None:
        """Call `callback` with the request units of every data request (each page of a query),
        from the response's `x-ms-request-charge`, through the SDK's `response_hook`."""

        def hook(headers: Mapping[str, Any], _: object) -> None:
            charge = headers.get("x-ms-request-charge")
            if charge is not None:
                callback(float(charge))

        self._items.hooks = {"response_hook": hook}

    @classmethod
    async def open(
        cls, settings: CosmosSettings, clock: Callable[[], float] = time.time, *, ttl_seconds: int
    ) -> CosmosStore:
        """Connect to the configured container, creating it first when the settings ask (its
        default TTL `ttl_seconds`, the conversations' lifetime).

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
        # The SDK logs every request and its headers at INFO: kept only when Anvil logs at debug
        # (ANVIL_LOG_LEVEL=debug, which `configure_logging` applies before the store opens).
        requests_logger = logging.getLogger(f"{__name__}.requests")
        requests_logger.setLevel(logging.DEBUG if logger.isEnabledFor(logging.DEBUG) else logging.WARNING)
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
                database = await send(client.create_database_if_not_exists(settings.cosmos_database))
                container = await send(
                    database.create_container_if_not_exists(
                        settings.cosmos_container,
                        partition_key=PartitionKey(path="/oid"),
                        # Items carry their own `ttl`; only a container default turns TTL on.
                        default_ttl=ttl_seconds,
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
        document = await self._items.read(oid, conversation_key(oid, conversation_id))
        if document is None:
            return None
        conversation = from_document(document)
        # Cosmos DB purges expired items in the background; until it does they read as missing.
        if conversation.is_expired(self._clock()):
            return None
        return Stored(conversation, _token(conversation.expires_at, document))

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        """Store a new conversation and return its ETag; `VersionConflict` if a live one has its key.

        Without `max_conversations`, one create request. With it, the conversation is admitted
        through the user's quota item first (`cosmos_quota.py`): `QuotaFull` when the user already
        keeps that many live conversations in the tenant, counting creations under way.
        """
        if max_conversations is not None:
            written = await create_within(self._items, conversation, max_conversations)
        else:
            written = await claim(self._items, conversation, self._items.body(conversation))
        return _token(conversation.expires_at, written)

    async def replace(self, conversation: Conversation, *, if_match: str) -> str:
        """Overwrite the stored conversation if it still carries `if_match`; returns the new ETag.

        One conditional write. `VersionConflict` when the stored conversation changed, is gone,
        or had expired by now (told by the ETag alone, as Cosmos DB may not have purged it yet).
        """
        c = conversation
        read = _parse_token(if_match)
        if read is None or read[0] <= self._clock():
            raise VersionConflict(c.key)
        written = await self._items.write_over(c.oid, c.key, self._items.body(c), read[1])
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
            document = await self._items.read(oid, key)
            if document is None:
                return False
            read = (float(document["expiresAt"]), str(document["_etag"]))
        expires_at, etag = read
        try:
            await self._items.delete(oid, key, etag=etag)
        except CosmosResourceNotFoundError:
            return False
        except CosmosAccessConditionFailedError:
            # Rewritten since it was read: by a turn, which leaves it live, or by a creation
            # starting it again, whose placeholder goes too (that creation then fails and retries).
            try:
                await self._items.delete(oid, key)
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
        parameters: Parameters = [
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
        rows = await self._items.query(
            oid,
            f"SELECT TOP {fetch} {_SUMMARY} FROM c WHERE {where} ORDER BY c.updatedAt DESC",
            parameters,
        )
        rows.sort(key=_newest_first)
        if len(rows) == fetch and rows[limit - 1]["updatedAt"] == rows[-1]["updatedAt"]:
            # TOP may have cut a run of equal updatedAt values anywhere; fetch the whole run so
            # the page ends on the right conversationId.
            boundary = rows[-1]["updatedAt"]
            run = await self._items.query(
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
        parameters: Parameters = [
            {"name": "@oid", "value": oid},
            {"name": "@tid", "value": tid},
            {"name": "@now", "value": self._clock()},
        ]
        query = f"SELECT VALUE COUNT(1) FROM c WHERE {_LIVE}"

        async def collect() -> int:
            items = self._items.container.query_items(
                query=query, parameters=parameters, partition_key=oid, **self._items.hooks
            )
            return sum([int(value) async for value in items])

        return await send(collect())

    async def delete_all(self, oid: str, tid: str) -> int:
        """Remove every conversation of the user; returns how many live ones were removed.

        One query for the ids in the user's partition, then one delete per item. If some
        delete fails, the others still run and the failure (`Unavailable`) is raised. The
        user's quota item is read first and pruned afterwards (`_forget`).
        """
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        now = self._clock()
        # Read before anything is deleted, so that each delete below comes after the read.
        quota = await self._items.read(oid, quota_id(oid, tid))
        rows = await self._items.query(
            oid,
            f"SELECT c.id, c.conversationId, c.expiresAt FROM c WHERE {ITEMS}",
            [{"name": "@oid", "value": oid}, {"name": "@tid", "value": tid}],
        )
        gate = asyncio.Semaphore(DELETE_CONCURRENCY)
        emptied: set[str] = set()

        async def remove(row: Mapping[str, Any]) -> bool:
            async with gate:
                try:
                    await self._items.delete(oid, str(row["id"]))
                except CosmosResourceNotFoundError:
                    emptied.add(str(row.get("conversationId")))
                    return False
            emptied.add(str(row.get("conversationId")))
            return float(row["expiresAt"]) > now

        # Every delete runs to its end even if another fails, so a retry has less left to do.
        results = await asyncio.gather(*(remove(row) for row in rows), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if quota is not None:
            await forget(self._items, oid, tid, quota, emptied)
        return sum(result is True for result in results)

    async def check(self, *, write: bool = False) -> None:
        """Raise `Unavailable` unless the container's properties can be read (one cheap request;
        with `write` too: a write would cost request units and leave an item behind)."""
        # No connection retries: a readiness probe is repeated anyway, and must answer before
        # its own timeout (the SDK otherwise spends about 2 s retrying a refused connection).
        await send(self._items.container.read(retry_connect=0))

    async def aclose(self) -> None:
        """Close the client (and the credential it used); later calls do nothing."""
        close, self._close = self._close, None
        if close is not None:
            await close()

    async def _check_container(self, settings: CosmosSettings) -> None:
        """Refuse to start on a missing container or one partitioned by another path."""
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        name = f"{settings.cosmos_database}/{settings.cosmos_container}"
        try:
            properties = await send(self._items.container.read(), CosmosResourceNotFoundError)
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


def _connection_policy(settings: CosmosSettings) -> Any:
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
