"""The Cosmos DB store's own logic, where the test server cannot reach: item TTL, the size
guard, the ETag bookkeeping, error mapping, retry settings, and lazy imports.

A small fake stands in for the SDK's container proxy; the contract suite and the integration
tests run the store against a real Cosmos DB-compatible server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import ServiceRequestError
from azure.cosmos.exceptions import CosmosHttpResponseError
from pydantic import SecretStr

from app.settings import Settings
from app.adapters.stores.codec import to_document
from app.adapters.stores.cosmos import MAX_ITEM_BYTES, CosmosStore, _connection_policy
from app.domain.conversation import Conversation, Turn
from app.ports import VersionConflict
from app.errors import InvalidInput, Unavailable

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0
SECRET = "account-key-that-must-never-show"


def http_error(status: int, **headers: str) -> CosmosHttpResponseError:
    error = CosmosHttpResponseError(  # type: ignore[no-untyped-call]
        status_code=status, message=f"status {status} with {SECRET}"
    )
    error.headers = headers
    return error


class FakeContainer:
    """Items in a dict, ETags from a counter; `fail[method]` is raised by the next such call."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, Exception] = {}

    def _call(self, method: str, **kwargs: Any) -> None:
        self.calls.append((method, kwargs))
        if method in self.fail:
            raise self.fail.pop(method)

    def _stored(self, body: dict[str, Any]) -> dict[str, Any]:
        stored = {**body, "_etag": uuid.uuid4().hex, "_ts": int(NOW)}
        self.items[body["id"]] = stored
        return dict(stored)

    async def read_item(self, item: str, partition_key: str, **kwargs: Any) -> dict[str, Any]:
        self._call("read_item", item=item, partition_key=partition_key, **kwargs)
        if item not in self.items:
            raise http_error(404)
        return dict(self.items[item])

    async def create_item(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self._call("create_item", body=body, **kwargs)
        if body["id"] in self.items:
            raise http_error(409)
        return self._stored(body)

    async def replace_item(self, item: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self._call("replace_item", item=item, body=body, **kwargs)
        if item not in self.items:
            raise http_error(404)
        if kwargs.get("etag") not in (None, self.items[item]["_etag"]):
            raise http_error(412)
        return self._stored(body)

    async def delete_item(self, item: str, partition_key: str, **kwargs: Any) -> None:
        self._call("delete_item", item=item, partition_key=partition_key, **kwargs)
        if item not in self.items:
            raise http_error(404)
        if kwargs.get("etag") not in (None, self.items[item]["_etag"]):
            raise http_error(412)
        del self.items[item]

    async def read(self, **kwargs: Any) -> dict[str, Any]:
        self._call("read", **kwargs)
        return {"id": "conversations", "partitionKey": {"paths": ["/oid"]}}

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def container() -> FakeContainer:
    return FakeContainer()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(container: FakeContainer, clock: Clock) -> AsyncIterator[CosmosStore]:
    opened = CosmosStore(container, clock=clock)
    yield opened
    await opened.aclose()


def conversation(
    version: int = 1, expires_in: float = 2_592_000.0, answer: str = "A service."
) -> Conversation:
    return Conversation(
        oid="oid-1",
        tid="tenant-1",
        conversation_id="conv-1",
        created_at=NOW,
        updated_at=NOW,
        expires_at=NOW + expires_in,
        version=version,
        turns=tuple(Turn(n, f"question {n}", answer, NOW) for n in range(1, version + 1)),
    )


# --- what is written --------------------------------------------------------------------------


@pytest.mark.parametrize(("expires_in", "ttl"), [(2_592_000.0, 2_592_000), (10.25, 11), (0.2, 1), (-5.0, 1)])
async def test_each_item_carries_a_ttl_in_whole_seconds_until_it_expires(
    store: CosmosStore, container: FakeContainer, expires_in: float, ttl: int
) -> None:
    c = conversation(expires_in=expires_in)
    await store.create(c)
    (_, kwargs), *_ = container.calls
    assert kwargs["body"] == {**to_document(c), "ttl": ttl}
    assert kwargs["body"]["id"] == "mcp:oid-1:conv-1"


async def test_an_item_near_the_cosmos_size_limit_is_refused_before_any_request(
    store: CosmosStore, container: FakeContainer
) -> None:
    huge = conversation(answer="x" * (MAX_ITEM_BYTES + 1))
    with pytest.raises(InvalidInput, match="too large to store"):
        await store.create(huge)
    assert container.calls == []


async def test_the_size_guard_counts_escaped_characters(store: CosmosStore, container: FakeContainer) -> None:
    # The SDK sends non-ASCII text as \\uXXXX escapes: six bytes for each of these characters.
    escaped = conversation(answer="é" * (MAX_ITEM_BYTES // 6 + 1))
    with pytest.raises(InvalidInput):
        await store.create(escaped)
    await store.create(conversation(answer="x" * (MAX_ITEM_BYTES // 2)))
    assert container.methods() == ["create_item"]


# --- one point read and one conditional write per turn ---------------------------------------


async def test_a_turn_is_one_point_read_and_one_write_with_the_etag_read(
    store: CosmosStore, container: FakeContainer
) -> None:
    await store.create(conversation(version=1))
    etag = container.items["mcp:oid-1:conv-1"]["_etag"]
    container.calls.clear()

    current = await store.get("oid-1", "conv-1")
    assert current is not None
    await store.replace(conversation(version=2), expected_version=current.version)

    assert container.methods() == ["read_item", "replace_item"]
    read, write = (kwargs for _, kwargs in container.calls)
    assert read == {"item": "mcp:oid-1:conv-1", "partition_key": "oid-1"}
    assert write["etag"] == etag
    assert write["match_condition"] == MatchConditions.IfNotModified


async def test_delete_after_a_read_is_one_conditional_delete(
    store: CosmosStore, container: FakeContainer
) -> None:
    await store.create(conversation())
    assert await store.get("oid-1", "conv-1") is not None
    etag = container.items["mcp:oid-1:conv-1"]["_etag"]
    container.calls.clear()

    assert await store.delete("oid-1", "conv-1") is True

    assert container.calls == [
        (
            "delete_item",
            {
                "item": "mcp:oid-1:conv-1",
                "partition_key": "oid-1",
                "etag": etag,
                "match_condition": MatchConditions.IfNotModified,
            },
        )
    ]


async def test_delete_of_a_conversation_rewritten_since_it_was_read_still_deletes_it(
    container: FakeContainer, clock: Clock
) -> None:
    reader, writer = CosmosStore(container, clock=clock), CosmosStore(container, clock=clock)
    await writer.create(conversation(version=1))
    assert await reader.get("oid-1", "conv-1") is not None
    await writer.replace(conversation(version=2), expected_version=1)

    assert await reader.delete("oid-1", "conv-1") is True
    assert container.items == {}


async def test_replace_of_a_version_this_process_did_not_read_reads_it_first(
    container: FakeContainer, clock: Clock
) -> None:
    writer = CosmosStore(container, clock=clock)
    await writer.create(conversation(version=1))
    other_replica = CosmosStore(container, clock=clock)
    container.calls.clear()

    await other_replica.replace(conversation(version=2), expected_version=1)

    assert container.methods() == ["read_item", "replace_item"]
    with pytest.raises(VersionConflict):
        # The writer's remembered ETag is for version 1, which is gone.
        await writer.replace(conversation(version=2, answer="the writer's own"), expected_version=1)


async def test_a_stale_etag_is_a_version_conflict(store: CosmosStore, container: FakeContainer) -> None:
    await store.create(conversation(version=1))
    assert await store.get("oid-1", "conv-1") is not None
    container.items["mcp:oid-1:conv-1"]["_etag"] = "changed-by-another-replica"

    with pytest.raises(VersionConflict):
        await store.replace(conversation(version=2), expected_version=1)


@pytest.mark.parametrize("status", [404, 412])
async def test_a_refused_conditional_write_is_a_version_conflict(
    store: CosmosStore, container: FakeContainer, status: int
) -> None:
    await store.create(conversation(version=1))
    container.fail["replace_item"] = http_error(status)
    with pytest.raises(VersionConflict):
        await store.replace(conversation(version=2), expected_version=1)


async def test_a_conflict_on_create_of_a_live_conversation_is_a_version_conflict(
    store: CosmosStore, container: FakeContainer
) -> None:
    await store.create(conversation(version=1))
    with pytest.raises(VersionConflict):
        await store.create(conversation(version=1, answer="another writer's first turn"))


async def test_an_expired_item_not_yet_purged_reads_as_missing(
    store: CosmosStore, container: FakeContainer, clock: Clock
) -> None:
    await store.create(conversation(expires_in=60))
    clock.now += 60
    assert await store.get("oid-1", "conv-1") is None
    with pytest.raises(VersionConflict):
        await store.replace(conversation(version=2), expected_version=1)


async def test_delete_all_reports_a_failed_delete_as_unavailable_after_the_others(
    store: CosmosStore, container: FakeContainer
) -> None:
    rows = [{"id": f"mcp:oid-1:c{i}", "expiresAt": NOW + 60} for i in range(3)]
    for row in rows:
        container.items[row["id"]] = {**row, "_etag": "e"}

    async def query_items(**kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        for row in rows:
            yield row

    container.query_items = query_items  # type: ignore[attr-defined]
    container.fail["delete_item"] = http_error(503)

    with pytest.raises(Unavailable):
        await store.delete_all("oid-1", "tenant-1")
    assert container.methods() == ["delete_item"] * 3
    assert len(container.items) == 1


# --- errors ------------------------------------------------------------------------------------


async def test_throttling_beyond_the_sdk_budget_is_unavailable_with_the_servers_hint(
    store: CosmosStore, container: FakeContainer
) -> None:
    container.fail["read_item"] = http_error(429, **{"x-ms-retry-after-ms": "1500"})
    with pytest.raises(Unavailable) as raised:
        await store.get("oid-1", "conv-1")
    assert raised.value.retry_after == 1.5
    assert raised.value.message == "The conversation store is busy; retry in 2 s."


@pytest.mark.parametrize(
    ("status", "headers", "message", "retry_after"),
    [
        (429, {}, "The conversation store is busy; retry in 1 s.", 1.0),
        (503, {"Retry-After": "4"}, "The conversation store is busy; retry in 4 s.", 4.0),
        (500, {}, "The conversation store failed (HTTP 500); retry in 1 s.", 1.0),
        (
            403,
            {},
            "The conversation store refused Anvil's credentials; "
            "the operator must grant access. Retry later.",
            None,
        ),
    ],
)
async def test_cosmos_failures_become_unavailable_without_details(
    store: CosmosStore,
    container: FakeContainer,
    status: int,
    headers: dict[str, str],
    message: str,
    retry_after: float | None,
) -> None:
    container.fail["create_item"] = http_error(status, **headers)
    with pytest.raises(Unavailable) as raised:
        await store.create(conversation())
    assert raised.value.message == message
    assert raised.value.retry_after == retry_after
    assert raised.value.__cause__ is None and raised.value.__context__ is not None
    assert SECRET not in str(raised.value)


async def test_a_connection_failure_is_unavailable(store: CosmosStore, container: FakeContainer) -> None:
    container.fail["read"] = ServiceRequestError(f"Cannot connect to host ({SECRET})")
    with pytest.raises(Unavailable) as raised:
        await store.check()
    assert raised.value.message == "The conversation store cannot be reached; retry shortly."
    assert SECRET not in str(raised.value)


async def test_check_does_not_retry_connections(store: CosmosStore, container: FakeContainer) -> None:
    await store.check()
    assert container.calls == [("read", {"retry_connect": 0})]


# --- settings and imports ----------------------------------------------------------------------


@pytest.mark.parametrize(("retries", "wait"), [(0, 0.0), (3, 0.5), (9, 30.0)])
def test_the_throttle_budget_reaches_the_sdk(retries: int, wait: float) -> None:
    settings = Settings(
        store="cosmos",
        cosmos_endpoint="https://example.documents.azure.com:443/",
        cosmos_key=SecretStr("a2V5"),
        cosmos_throttle_retries=retries,
        cosmos_throttle_wait_seconds=wait,
    )
    options = _connection_policy(settings).RetryOptions
    assert (options.MaxRetryAttemptCount, options.MaxWaitTimeInSeconds) == (retries, wait)


def test_importing_the_store_does_not_import_the_azure_sdk() -> None:
    code = (
        "import json, sys\n"
        "import app.main, app.adapters.stores.cosmos\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'azure' or m.startswith('azure.'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []
