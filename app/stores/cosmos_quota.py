"""The per-user limit on live conversations in Cosmos DB, and the placeholders a creation holds
its key with (`CosmosStore.create`); functions of the store's `Items`.

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

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import re
import secrets
from collections.abc import Mapping
from typing import Any

from app.domain.conversation import Conversation, conversation_key
from app.domain.ports import QuotaFull, VersionConflict
from app.errors import Unavailable
from app.stores.codec import from_document, to_document
from app.stores.cosmos_errors import send
from app.stores.cosmos_items import DELETE_CONCURRENCY, Items, same_item

logger = logging.getLogger(__name__)

#: A creation's placeholder younger than this (seconds) is taken for a creation still under way:
#: other creations neither take its key nor count it out of the quota. Only liveness rests on it
#: (a creation held up for longer may fail with `VersionConflict`, which callers retry), never
#: the limit itself. A creation takes three requests, tens of milliseconds; a placeholder left by
#: a process that died mid-creation holds its key (`claim` waits it out) for at most this long.
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

# Quota items carry no `tid` (their tenant is under `tenant`) and no `expiresAt`, and every query
# for conversations names `c.tid`, so none of them (`list`, `count`, `delete_all`) ever matches a
# quota item; only `/oid` of it is indexed. Placeholders carry `tid` and an `expiresAt` of 0:
# listings and counts skip them as expired, `delete_all` removes them with the rest.
_QUOTA_PREFIX = "quota:"
_QUOTA_KIND = "quota"
#: The user's items in the tenant (conversations and placeholders, never the quota item).
ITEMS = "c.oid = @oid AND c.tid = @tid"
#: No item ever has this ETag (Cosmos DB's are quoted GUIDs): a delete naming it only tells
#: whether the key holds an item (412) or not (404), as decided where writes are decided.
_PROBE_ETAG = '"anvil-probe-matches-no-item"'
#: A tenant id that may stand in an item id as it is (ids must not hold `/`, `\`, `?` or `#`).
_PLAIN_TENANT = re.compile(r"[A-Za-z0-9._-]{1,128}")


async def create_within(items: Items, conversation: Conversation, limit: int) -> dict[str, Any]:
    """Create `conversation` under the quota (steps 1 to 4 above); the item written.

    `QuotaFull` when its user already keeps `limit` live conversations in the tenant, counting
    creations under way; `VersionConflict` if a live one has its key."""
    c = conversation
    body = items.body(c)  # the size guard, before any request
    quota_key = quota_id(c.oid, c.tid)
    placeholder: dict[str, Any] | None = None
    try:
        for attempt in range(QUOTA_ATTEMPTS):
            if attempt > 1:
                # Creations of one user that keep colliding spread out ("full jitter").
                await asyncio.sleep(random.uniform(0.0, min(0.2, 0.005 * 2 ** (attempt - 2))))
            quota = await items.read(c.oid, quota_key)
            now = items.clock()
            admitted = admitted_of(quota)
            counted = int(quota.get("counted", 0)) if quota is not None else 0
            others = len(admitted) - (c.conversation_id in admitted)
            if quota is None or others >= limit or len(admitted) >= 2 * counted + QUOTA_SLACK:
                pruned, counted = await reconcile(items, c, admitted, now, claimed=placeholder is not None)
            else:
                pruned = admitted
            others = len(pruned) - (c.conversation_id in pruned)
            if others >= limit:
                if quota is not None and pruned != admitted:
                    # Spares the next creation the same checks; losing this race loses nothing.
                    await write_quota(items, c.oid, c.tid, quota, pruned, counted)
                raise QuotaFull(others)
            if placeholder is None:
                placeholder = await claim(items, c, pending_item(c, now))
            admitting = {**pruned, c.conversation_id: int(now)}
            if await write_quota(items, c.oid, c.tid, quota, admitting, counted):
                break
        else:
            raise Unavailable(
                "Too many conversations are being created at once for this user; retry in a second.",
                retry_after=1.0,
            )
    except Exception:
        # Not admitted after all: free the key at once rather than after the grace.
        if placeholder is not None:
            await abandon(items, c, placeholder)
        raise
    written = await items.write_over(c.oid, c.key, body, str(placeholder["_etag"]))
    return written


async def claim(items: Items, c: Conversation, body: dict[str, Any]) -> dict[str, Any]:
    """Create `body` under `c`'s key, or write it over an expired conversation or a placeholder
    given up on there; `VersionConflict` if a live conversation or a creation under way holds it."""
    from azure.cosmos.exceptions import CosmosResourceExistsError

    try:
        created: dict[str, Any] = await send(
            items.container.create_item(body=body, **items.hooks), CosmosResourceExistsError
        )
    except CosmosResourceExistsError:
        pass
    else:
        return created
    existing = await items.read(c.oid, c.key)
    # Another creation's placeholder: wait until it becomes the conversation or is given up
    # on (a process that died mid-creation leaves one), rather than failing every retry of
    # the caller's until the grace is over.
    for _ in range(math.ceil(PENDING_GRACE_SECONDS / PENDING_POLL_SECONDS)):
        if existing is None or same_item(existing, body) or not under_way(existing, items.clock()):
            break
        await asyncio.sleep(PENDING_POLL_SECONDS)
        existing = await items.read(c.oid, c.key)
    else:
        raise VersionConflict(c.key)
    if existing is None:
        raise VersionConflict(c.key)
    if same_item(existing, body):
        # Our own write, applied although its response was lost and the SDK retried it.
        return existing
    if not from_document(existing).is_expired(items.clock()):
        raise VersionConflict(c.key)
    return await items.write_over(c.oid, c.key, body, str(existing["_etag"]))


async def reconcile(
    items: Items, c: Conversation, admitted: Mapping[str, int], now: float, *, claimed: bool
) -> tuple[dict[str, int], int]:
    """The entries of `admitted` that may still be live, with the live conversations the
    query shows added, and how many of those it showed; see the class for the rules.

    `VersionConflict` when the query shows `c`'s key live, unless this creation already holds
    the key with its placeholder (then what the query shows is older than that).
    """
    rows = await items.query(
        c.oid,
        f"SELECT c.conversationId, c.expiresAt, c.pending, c.pendingSince, c._etag FROM c WHERE {ITEMS}",
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
        if cid == c.conversation_id or (row is not None and under_way(row, now)):
            # The key being created is settled by this creation itself, as it goes on.
            kept[cid] = admitted[cid]
        else:
            checks.append((cid, _PROBE_ETAG if row is None else str(row["_etag"])))
    gate = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def emptied(cid: str, etag: str) -> bool:
        async with gate:
            return await items.empties(c.oid, conversation_key(c.oid, cid), etag)

    results = await asyncio.gather(*(emptied(cid, etag) for cid, etag in checks), return_exceptions=True)
    for (cid, _), result in zip(checks, results, strict=True):
        if isinstance(result, BaseException):
            raise result
        if not result:
            kept[cid] = admitted[cid]
    return kept, len(live)


async def write_quota(
    items: Items,
    oid: str,
    tid: str,
    read: Mapping[str, Any] | None,
    admitted: Mapping[str, int],
    counted: int,
) -> bool:
    """Write the quota item if it is still the version `read` (None: still missing); False if not."""
    from azure.core import MatchConditions
    from azure.cosmos.exceptions import (
        CosmosAccessConditionFailedError,
        CosmosResourceExistsError,
        CosmosResourceNotFoundError,
    )

    quota_key = quota_id(oid, tid)
    body = {
        "id": quota_key,
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
            await send(items.container.create_item(body=body, **items.hooks), CosmosResourceExistsError)
        else:
            await send(
                items.container.replace_item(
                    item=quota_key,
                    body=body,
                    etag=read["_etag"],
                    match_condition=MatchConditions.IfNotModified,
                    **items.hooks,
                ),
                CosmosAccessConditionFailedError,
                CosmosResourceNotFoundError,
            )
    except (CosmosResourceExistsError, CosmosAccessConditionFailedError, CosmosResourceNotFoundError):
        # Another writer got there first, or the SDK's retry of our own applied write found
        # it done; either way the caller reads the item again.
        return False
    return True


async def abandon(items: Items, c: Conversation, placeholder: Mapping[str, Any]) -> None:
    """Remove a placeholder that will not become a conversation, if it is still there.

    Best effort: nothing reads it as a conversation, and Cosmos DB purges it anyway.
    """
    try:
        await items.empties(c.oid, c.key, str(placeholder["_etag"]))
    except Unavailable:
        logger.info("Left a placeholder of an abandoned creation for Cosmos DB to purge")


async def forget(items: Items, oid: str, tid: str, quota: Mapping[str, Any], emptied: set[str]) -> None:
    """After `delete_all`: drop the quota entries of keys emptied since `quota` was read (by the
    deletes, or by a probe for those the query did not show) and remove the item once none is
    left. Best effort: what a lost race or an error leaves, the next reconciliation drops."""
    from azure.core import MatchConditions
    from azure.cosmos.exceptions import CosmosAccessConditionFailedError, CosmosResourceNotFoundError

    admitted = admitted_of(quota)
    unknown = [cid for cid in admitted if cid not in emptied]
    gate = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def probe(cid: str) -> bool:
        async with gate:
            return await items.empties(oid, conversation_key(oid, cid), _PROBE_ETAG)

    try:
        probed = await asyncio.gather(*(probe(cid) for cid in unknown))
        kept = {cid: admitted[cid] for cid, gone in zip(unknown, probed, strict=True) if not gone}
        if kept:
            await write_quota(items, oid, tid, quota, kept, 0)
            return
        await send(
            items.container.delete_item(
                item=quota_id(oid, tid),
                partition_key=oid,
                etag=quota["_etag"],
                match_condition=MatchConditions.IfNotModified,
                **items.hooks,
            ),
            CosmosResourceNotFoundError,
            CosmosAccessConditionFailedError,
        )
    except (Unavailable, CosmosResourceNotFoundError, CosmosAccessConditionFailedError):
        logger.info("Left entries in a quota item for the next creation to reconcile")


def pending_item(c: Conversation, now: float) -> dict[str, Any]:
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


def quota_id(oid: str, tid: str) -> str:
    """The id of the user's quota item in tenant `tid` (a tenant id unfit for an id by its digest)."""
    tenant = tid if _PLAIN_TENANT.fullmatch(tid) else "sha256-" + hashlib.sha256(tid.encode()).hexdigest()
    return f"{_QUOTA_PREFIX}{oid}:{tenant}"


def admitted_of(quota: Mapping[str, Any] | None) -> dict[str, int]:
    """The entries of a quota item as read: conversation id -> when it was admitted (whole
    seconds since the epoch, for whoever reads the item; no decision rests on them)."""
    entries = quota.get("admitted") if quota is not None else None
    return {str(cid): int(at) for cid, at in (entries or {}).items()}


def under_way(item: Mapping[str, Any], now: float) -> bool:
    """Whether `item` is the placeholder of a creation that may still be going on."""
    if item.get("pending") is not True:
        return False
    return now - float(item.get("pendingSince") or 0.0) < PENDING_GRACE_SECONDS
