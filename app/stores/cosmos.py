"""A conversation store in an Azure Cosmos DB for NoSQL container (partition key `/oid`).

One item per conversation: `to_document(conversation)` plus a per-item `ttl`, under
`id = mcp:{oid}:{conversationId}`, in the partition of its owner. A turn costs one point read
(`get`) and one conditional write (`replace` with the ETag that read returned). Beside them, in
the same partition, one quota item per user and tenant (`id = quota:{oid}:{tid}`) makes the
per-user limit on live conversations exact (`CosmosStore.create`). The Azure SDK is imported by
the methods that call it, so other stores never load it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import random
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from app.domain.conversation import Conversation, ConversationPage, ConversationSummary, conversation_key
from app.domain.ports import QuotaFull, Stored, VersionConflict
from app.errors import InvalidInput, Unavailable
from app.stores.codec import from_document, to_document
from app.stores.cursor import decode_cursor, encode_cursor

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
#: A creation's placeholder younger than this (seconds) is taken for a creation still under way:
#: other creations neither take its key nor count it out of the quota. Only liveness rests on it
#: (a creation held up for longer may fail with `VersionConflict`, which callers retry), never
#: the limit itself. A creation takes three requests, tens of milliseconds; a placeholder left by
#: a process that died mid-creation holds its key (`_claim` waits it out) for at most this long.
PENDING_GRACE_SECONDS = 5.0
#: How often (seconds) a creation waiting for another's placeholder looks at the key again.
PENDING_POLL_SECONDS = 0.1
#: `ttl` of a placeholder, so that Cosmos DB purges one whose creation never finished.
PENDING_TTL_SECONDS = 600
#: Rounds of reading the quota item and writing it back before a creation gives up; a round is
#: lost only when another creation of the same user was admitted meanwhile.
QUOTA_ATTEMPTS = 16
#: Entries the quota item may hold beyond twice the live conversations it last counted before a
#: creation below the limit reconciles it anyway, so it stays small however many come and go.
QUOTA_SLACK = 16

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

# Quota items carry no `tid` (their tenant is under `tenant`) and no `expiresAt`, and every query
# for conversations names `c.tid`, so none of them (`list`, `count`, `delete_all`) ever matches a
# quota item; only `/oid` of it is indexed. Placeholders carry `tid` and an `expiresAt` of 0:
# listings and counts skip them as expired, `delete_all` removes them with the rest.
_QUOTA_PREFIX = "quota:"
_QUOTA_KIND = "quota"
_ITEMS = "c.oid = @oid AND c.tid = @tid"
#: No item ever has this ETag (Cosmos DB's are quoted GUIDs): a delete naming it only tells
#: whether the key holds an item (412) or not (404), as decided where writes are decided.
_PROBE_ETAG = '"anvil-probe-matches-no-item"'
#: A tenant id that may stand in an item id as it is (ids must not hold `/`, `\`, `?` or `#`).
_PLAIN_TENANT = re.compile(r"[A-Za-z0-9._-]{1,128}")


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

    The quota (`create(..., max_conversations=n)`) uses single-item requests only: point reads,
    conditional writes and one query, no transactional batch (which the Cosmos DB-compatible
    test server does not run). The user's quota item in the tenant, `quota:{oid}:{tid}` in the
    user's partition, maps each conversation admitted under the quota to when it was admitted
    (`admitted`). A creation:

    1. reads the quota item and, if the others admitted number `n` or more (or the item has
       gathered many more entries than live conversations), reconciles it (below); still `n` or
       more: `QuotaFull`, before anything of the conversation is written;
    2. writes a placeholder under the conversation's key: an item every read, listing and count
       takes for an expired conversation (`expiresAt` 0, `pending`); `VersionConflict` if a live
       conversation, or another creation under way, holds the key;
    3. admits the conversation: writes the quota item back, `IfNotModified` on the ETag read in
       1 (a lost race goes back to 1);
    4. turns the placeholder into the conversation, `IfNotModified` on the placeholder's ETag.

    Reconciling starts from one query of the user's items in the tenant. A live conversation
    counts, admitted or not (one created before the quota was on is taken in). An entry whose
    key shows a placeholder younger than `PENDING_GRACE_SECONDS` stays (a creation under way).
    Every other entry not live stays unless one conditional delete on its key, sent after the
    quota item was read, proves the key empty: `IfNotModified` on the `_etag` the query showed
    for a placeholder given up on or an expired conversation (which removes that item), or on an
    ETag no item has when the query showed nothing there (which removes nothing). A 404 or a
    removal drops the entry; a 412 (the item changed since the query, or is there after all)
    keeps it.

    Why a user never keeps more than `n` live conversations, however many creations run at once
    in however many processes: a conversation becomes live only in step 4, which succeeds only if
    its placeholder is unchanged since step 2, and step 3 admitted it before. Writes of the quota
    item are conditional on the version they were computed from, so they form one sequence, and
    each admission is made from a version with fewer than `n` other entries. An entry leaves the
    quota item only in such a write, made from a version that still held it, after a delete on
    its key that found no item or removed a non-live one, sent after that version was read, hence
    after the entry's placeholder was written: from then on that placeholder is gone, any item
    written under the key has a new `_etag`, and the entry's step 4 can only fail. An entry whose
    conversation is live is therefore never dropped, so the live conversations never outnumber
    the entries of the current version; and `n` is only ever exceeded by conversations taken in
    as already there. The query is only a hint: what it shows late or misses costs a delete that
    finds the item there (412), never the limit; it only decides alone which conversations made
    without the quota (before it was turned on) are taken in. Clocks matter only for expiry, as
    everywhere in this store, and for the grace of placeholders, which only decides who waits.
    Like every conditional write here, this needs one write region (with multi-region writes
    Cosmos DB checks conditions in each region apart).

    `delete` leaves the quota item alone (it costs what it did before): the entry of a deleted
    conversation goes at the next reconciliation. `delete_all` reads the quota item before its
    deletes, drops the entries of the keys it emptied, and removes the item once none is left.
    The quota item has `ttl` -1 (never expires, whatever the container's default): it must
    outlive every conversation it admitted, whose turns keep them alive.
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

    async def create(self, conversation: Conversation, *, max_conversations: int | None = None) -> str:
        """Store a new conversation and return its ETag; `VersionConflict` if a live one has its key.

        Without `max_conversations`, one create request. With it, the conversation is admitted
        through the user's quota item first (see the class): `QuotaFull` when the user already
        keeps that many live conversations in the tenant, counting creations under way.
        """
        if max_conversations is not None:
            return await self._create_within(conversation, max_conversations)
        c = conversation
        written = await self._claim(c, self._body(c))
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
            # Rewritten since it was read: by a turn, which leaves it live, or by a creation
            # starting it again, whose placeholder goes too (that creation then fails and retries).
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
        delete fails, the others still run and the failure (`Unavailable`) is raised. The
        user's quota item is read first and pruned afterwards (`_forget`).
        """
        from azure.cosmos.exceptions import CosmosResourceNotFoundError

        now = self._clock()
        # Read before anything is deleted, so that each delete below comes after the read.
        quota = await self._read(oid, _quota_id(oid, tid))
        rows = await self._query(
            oid,
            f"SELECT c.id, c.conversationId, c.expiresAt FROM c WHERE {_ITEMS}",
            [{"name": "@oid", "value": oid}, {"name": "@tid", "value": tid}],
        )
        gate = asyncio.Semaphore(DELETE_CONCURRENCY)
        emptied: set[str] = set()

        async def remove(row: Mapping[str, Any]) -> bool:
            async with gate:
                try:
                    await self._delete(oid, str(row["id"]))
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
            await self._forget(oid, tid, quota, emptied)
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

    async def _create_within(self, conversation: Conversation, limit: int) -> str:
        """`create` under the quota: steps 1 to 4 of the class's description."""
        c = conversation
        body = self._body(c)  # the size guard, before any request
        quota_id = _quota_id(c.oid, c.tid)
        placeholder: dict[str, Any] | None = None
        try:
            for attempt in range(QUOTA_ATTEMPTS):
                if attempt > 1:
                    # Creations of one user that keep colliding spread out ("full jitter").
                    await asyncio.sleep(random.uniform(0.0, min(0.2, 0.005 * 2 ** (attempt - 2))))
                quota = await self._read(c.oid, quota_id)
                now = self._clock()
                admitted = _admitted(quota)
                counted = int(quota.get("counted", 0)) if quota is not None else 0
                others = len(admitted) - (c.conversation_id in admitted)
                if quota is None or others >= limit or len(admitted) >= 2 * counted + QUOTA_SLACK:
                    pruned, counted = await self._reconcile(c, admitted, now, claimed=placeholder is not None)
                else:
                    pruned = admitted
                others = len(pruned) - (c.conversation_id in pruned)
                if others >= limit:
                    if quota is not None and pruned != admitted:
                        # Spares the next creation the same checks; losing this race loses nothing.
                        await self._write_quota(c.oid, c.tid, quota, pruned, counted)
                    raise QuotaFull(others)
                if placeholder is None:
                    placeholder = await self._claim(c, self._placeholder(c, now))
                admitting = {**pruned, c.conversation_id: int(now)}
                if await self._write_quota(c.oid, c.tid, quota, admitting, counted):
                    break
            else:
                raise Unavailable(
                    "Too many conversations are being created at once for this user; retry in a second.",
                    retry_after=1.0,
                )
        except Exception:
            # Not admitted after all: free the key at once rather than after the grace.
            if placeholder is not None:
                await self._abandon(c, placeholder)
            raise
        written = await self._write_over(c.oid, c.key, body, str(placeholder["_etag"]))
        return _token(c.expires_at, written)

    async def _claim(self, c: Conversation, body: dict[str, Any]) -> dict[str, Any]:
        """Create `body` under `c`'s key, or write it over an expired conversation or a placeholder
        given up on there; `VersionConflict` if a live conversation or a creation under way holds it."""
        from azure.cosmos.exceptions import CosmosResourceExistsError

        try:
            created: dict[str, Any] = await _send(
                self._container.create_item(body=body, **self._hooks), CosmosResourceExistsError
            )
        except CosmosResourceExistsError:
            pass
        else:
            return created
        existing = await self._read(c.oid, c.key)
        # Another creation's placeholder: wait until it becomes the conversation or is given up
        # on (a process that died mid-creation leaves one), rather than failing every retry of
        # the caller's until the grace is over.
        for _ in range(math.ceil(PENDING_GRACE_SECONDS / PENDING_POLL_SECONDS)):
            if existing is None or _same_item(existing, body) or not _under_way(existing, self._clock()):
                break
            await asyncio.sleep(PENDING_POLL_SECONDS)
            existing = await self._read(c.oid, c.key)
        else:
            raise VersionConflict(c.key)
        if existing is None:
            raise VersionConflict(c.key)
        if _same_item(existing, body):
            # Our own write, applied although its response was lost and the SDK retried it.
            return existing
        if not from_document(existing).is_expired(self._clock()):
            raise VersionConflict(c.key)
        return await self._write_over(c.oid, c.key, body, str(existing["_etag"]))

    async def _reconcile(
        self, c: Conversation, admitted: Mapping[str, int], now: float, *, claimed: bool
    ) -> tuple[dict[str, int], int]:
        """The entries of `admitted` that may still be live, with the live conversations the
        query shows added, and how many of those it showed; see the class for the rules.

        `VersionConflict` when the query shows `c`'s key live, unless this creation already holds
        the key with its placeholder (then what the query shows is older than that).
        """
        rows = await self._query(
            c.oid,
            f"SELECT c.conversationId, c.expiresAt, c.pending, c.pendingSince, c._etag FROM c WHERE {_ITEMS}",
            [{"name": "@oid", "value": c.oid}, {"name": "@tid", "value": c.tid}],
        )
        found = {str(row["conversationId"]): row for row in rows}
        live = {cid for cid, row in found.items() if float(row["expiresAt"]) > now}
        if c.conversation_id in live and not claimed:
            raise VersionConflict(c.key)
        kept = {cid: admitted.get(cid, int(now)) for cid in live}
        checks: list[tuple[str, str]] = []
        for cid in admitted:
            row = found.get(cid)
            if cid in kept:
                continue
            if cid == c.conversation_id or (row is not None and _under_way(row, now)):
                # The key being created is settled by this creation itself, as it goes on.
                kept[cid] = admitted[cid]
            else:
                checks.append((cid, _PROBE_ETAG if row is None else str(row["_etag"])))
        gate = asyncio.Semaphore(DELETE_CONCURRENCY)

        async def emptied(cid: str, etag: str) -> bool:
            async with gate:
                return await self._empties(c.oid, conversation_key(c.oid, cid), etag)

        results = await asyncio.gather(*(emptied(cid, etag) for cid, etag in checks), return_exceptions=True)
        for (cid, _), result in zip(checks, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            if not result:
                kept[cid] = admitted[cid]
        return kept, len(live)

    async def _empties(self, oid: str, key: str, etag: str) -> bool:
        """Whether a delete of `key` naming `etag` leaves it empty: it removed the item there or
        found none. False (412) when an item with another `_etag` is there."""
        from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

        try:
            await self._delete(oid, key, etag=etag)
        except CosmosResourceNotFoundError:
            return True
        except CosmosAccessConditionFailedError:
            return False
        return True

    async def _write_quota(
        self, oid: str, tid: str, read: Mapping[str, Any] | None, admitted: Mapping[str, int], counted: int
    ) -> bool:
        """Write the quota item if it is still the version `read` (None: still missing); False if not."""
        from azure.core import MatchConditions
        from azure.cosmos.exceptions import (
            CosmosAccessConditionFailedError,
            CosmosResourceExistsError,
            CosmosResourceNotFoundError,
        )

        quota_id = _quota_id(oid, tid)
        body = {
            "id": quota_id,
            "oid": oid,
            "kind": _QUOTA_KIND,
            "tenant": tid,
            "admitted": dict(admitted),
            "counted": counted,
            # Never expires: it must outlive every conversation it admitted, and turns extend those.
            "ttl": -1,
        }
        try:
            if read is None:
                await _send(self._container.create_item(body=body, **self._hooks), CosmosResourceExistsError)
            else:
                await _send(
                    self._container.replace_item(
                        item=quota_id,
                        body=body,
                        etag=read["_etag"],
                        match_condition=MatchConditions.IfNotModified,
                        **self._hooks,
                    ),
                    CosmosAccessConditionFailedError,
                    CosmosResourceNotFoundError,
                )
        except (CosmosResourceExistsError, CosmosAccessConditionFailedError, CosmosResourceNotFoundError):
            # Another writer got there first, or the SDK's retry of our own applied write found
            # it done; either way the caller reads the item again.
            return False
        return True

    async def _abandon(self, c: Conversation, placeholder: Mapping[str, Any]) -> None:
        """Remove a placeholder that will not become a conversation, if it is still there.

        Best effort: nothing reads it as a conversation, and Cosmos DB purges it anyway.
        """
        try:
            await self._empties(c.oid, c.key, str(placeholder["_etag"]))
        except Unavailable:
            logger.info("Left a placeholder of an abandoned creation for Cosmos DB to purge")

    async def _forget(self, oid: str, tid: str, quota: Mapping[str, Any], emptied: set[str]) -> None:
        """After `delete_all`: drop the quota entries of keys emptied since `quota` was read (by the
        deletes, or by a probe for those the query did not show) and remove the item once none is
        left. Best effort: what a lost race or an error leaves, the next reconciliation drops."""
        from azure.core import MatchConditions
        from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

        admitted = _admitted(quota)
        unknown = [cid for cid in admitted if cid not in emptied]
        gate = asyncio.Semaphore(DELETE_CONCURRENCY)

        async def probe(cid: str) -> bool:
            async with gate:
                return await self._empties(oid, conversation_key(oid, cid), _PROBE_ETAG)

        try:
            probed = await asyncio.gather(*(probe(cid) for cid in unknown))
            kept = {cid: admitted[cid] for cid, gone in zip(unknown, probed, strict=True) if not gone}
            if kept:
                await self._write_quota(oid, tid, quota, kept, 0)
                return
            await _send(
                self._container.delete_item(
                    item=_quota_id(oid, tid),
                    partition_key=oid,
                    etag=quota["_etag"],
                    match_condition=MatchConditions.IfNotModified,
                    **self._hooks,
                ),
                CosmosResourceNotFoundError,
                CosmosAccessConditionFailedError,
            )
        except (Unavailable, CosmosResourceNotFoundError, CosmosAccessConditionFailedError):
            logger.info("Left entries in a quota item for the next creation to reconcile")

    def _placeholder(self, c: Conversation, now: float) -> dict[str, Any]:
        """What holds `c`'s key while it is admitted: read as an expired conversation (`expiresAt`
        0, no turns), marked `pending` since `now`, purged by Cosmos DB if it is given up on."""
        return {
            **to_document(c),
            "expiresAt": 0.0,
            "instructions": None,
            "title": None,
            "turnCount": 0,
            "turns": [],
            "pending": True,
            "pendingSince": now,
            # Tells this creation's placeholder from another's of the same moment, so that only
            # a lost answer to our own write is taken for ours.
            "claim": secrets.token_hex(8),
            "ttl": PENDING_TTL_SECONDS,
        }

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


def _quota_id(oid: str, tid: str) -> str:
    """The id of the user's quota item in tenant `tid` (a tenant id unfit for an id by its digest)."""
    tenant = tid if _PLAIN_TENANT.fullmatch(tid) else "sha256-" + hashlib.sha256(tid.encode()).hexdigest()
    return f"{_QUOTA_PREFIX}{oid}:{tenant}"


def _admitted(quota: Mapping[str, Any] | None) -> dict[str, int]:
    """The entries of a quota item as read: conversation id -> when it was admitted (whole
    seconds since the epoch, for whoever reads the item; no decision rests on them)."""
    entries = quota.get("admitted") if quota is not None else None
    return {str(cid): int(at) for cid, at in (entries or {}).items()}


def _under_way(item: Mapping[str, Any], now: float) -> bool:
    """Whether `item` is the placeholder of a creation that may still be going on."""
    if item.get("pending") is not True:
        return False
    return now - float(item.get("pendingSince") or 0.0) < PENDING_GRACE_SECONDS


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
