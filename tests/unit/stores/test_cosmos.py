"""The Cosmos DB store's own logic, where the test server cannot reach: request counts per
operation, lost responses, item TTL, the size guard, error mapping, retry settings, logging,
and lazy imports.

A small fake stands in for the SDK's container proxy; the contract suite and the integration
tests run the store against a real Cosmos DB-compatible server.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import ServiceRequestError
from azure.cosmos.exceptions import (
    CosmosAccessConditionFailedError,
    CosmosHttpResponseError,
    CosmosResourceExistsError,
    CosmosResourceNotFoundError,
)
from pydantic import SecretStr

from app.domain.conversation import Conversation, Turn
from app.domain.ports import VersionConflict
from app.errors import InvalidInput, Unavailable
from app.settings import Settings
from app.stores.codec import to_document
from app.stores.cosmos import CosmosStore, _connection_policy
from app.stores.cosmos_items import MAX_ITEM_BYTES

pytestmark = pytest.mark.anyio

NOW = 1_700_000_000.0
SECRET = "account-key-that-must-never-show"
KEY = "mcp:oid-1:conv-1"

_ERRORS: dict[int, type[CosmosHttpResponseError]] = {
    404: CosmosResourceNotFoundError,
    409: CosmosResourceExistsError,
    412: CosmosAccessConditionFailedError,
}


def http_error(status: int, **headers: str) -> CosmosHttpResponseError:
    """The error the SDK raises for `status` (its own class for 404, 409 and 412)."""
    error = _ERRORS.get(status, CosmosHttpResponseError)(  # type: ignore[no-untyped-call]
        status_code=status, message=f"status {status} with {SECRET}"
    )
    error.headers = headers
    return error


class FakeContainer:
    """Items in a dict, fresh ETags on every write; `fail[method]` is raised by the next such call.

    `lose[method]` makes the next such write apply and then fail as the SDK's own retry of it
    would: the write happened, but the caller only sees the retry's 409 or 412.
    """

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, Exception] = {}
        self.lose: set[str] = set()

    def _call(self, method: str, **kwargs: Any) -> None:
        self.calls.append((method, kwargs))
        if method in self.fail:
            raise self.fail.pop(method)

    def _stored(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        stored = {**body, "_etag": uuid.uuid4().hex, "_ts": int(NOW)}
        self.items[body["id"]] = stored
        if method in self.lose:
            self.lose.discard(method)
            raise http_error(409 if method == "create_item" else 412)
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
        return self._stored("create_item", body)

    async def replace_item(self, item: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self._call("replace_item", item=item, body=body, **kwargs)
        if item not in self.items:
            raise http_error(404)
        if kwargs.get("etag") not in (None, self.items[item]["_etag"]):
            raise http_error(412)
        return self._stored("replace_item", body)

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

    def etag(self) -> str:
        return str(self.items[KEY]["_etag"])


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


async def etag_read(store: CosmosStore) -> str:
    stored = await store.get("oid-1", "conv-1")
    assert stored is not None
    return stored.etag


# --- what is written --------------------------------------------------------------------------


@pytest.mark.parametrize(("expires_in", "ttl"), [(2_592_000.0, 2_592_000), (10.25, 11), (0.2, 1), (-5.0, 1)])
async def test_each_item_carries_a_ttl_in_whole_seconds_until_it_expires(
    store: CosmosStore, container: FakeContainer, expires_in: float, ttl: int
) -> None:
    c = conversation(expires_in=expires_in)
    await store.create(c)
    (_, kwargs), *_ = container.calls
    assert kwargs["body"] == {**to_document(c), "ttl": ttl}
    assert kwargs["body"]["id"] == KEY


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
    etag = container.etag()
    container.calls.clear()

    written = await store.replace(conversation(version=2), if_match=await etag_read(store))

    assert container.methods() == ["read_item", "replace_item"]
    read, write = (kwargs for _, kwargs in container.calls)
    assert read == {"item": KEY, "partition_key": "oid-1"}
    assert write["etag"] == etag
    assert write["match_condition"] == MatchConditions.IfNotModified
    assert written == await etag_read(store)


async def test_every_write_returns_the_etag_the_next_read_reports(store: CosmosStore) -> None:
    created = await store.create(conversation(version=1))
    assert created == await etag_read(store)
    replaced = await store.replace(conversation(version=2), if_match=created)
    assert replaced == await etag_read(store)
    assert replaced != created


async def test_delete_with_the_etag_read_is_one_conditional_delete(
    store: CosmosStore, container: FakeContainer
) -> None:
    await store.create(conversation())
    etag = await etag_read(store)
    cosmos_etag = container.etag()
    container.calls.clear()

    assert await store.delete("oid-1", "conv-1", if_match=etag) is True

    assert container.calls == [
        (
            "delete_item",
            {
                "item": KEY,
                "partition_key": "oid-1",
                "etag": cosmos_etag,
                "match_condition": MatchConditions.IfNotModified,
            },
        )
    ]


async def test_delete_with_the_etag_of_a_conversation_already_gone_is_one_request(
    store: CosmosStore, container: FakeContainer
) -> None:
    await store.create(conversation())
    etag = await etag_read(store)
    del container.items[KEY]
    container.calls.clear()

    assert await store.delete("oid-1", "conv-1", if_match=etag) is False
    assert container.methods() == ["delete_item"]


async def test_delete_of_a_conversation_rewritten_since_it_was_read_still_deletes_it(
    store: CosmosStore, container: FakeContainer
) -> None:
    first = await store.create(conversation(version=1))
    await store.replace(conversation(version=2), if_match=first)
    container.calls.clear()

    assert await store.delete("oid-1", "conv-1", if_match=first) is True
    assert container.items == {}
    assert [kwargs.get("etag") for _, kwargs in container.calls] == [first.rpartition("/")[2], None]


async def test_delete_without_an_etag_reads_first_and_an_expired_item_counts_as_not_removed(
    store: CosmosStore, container: FakeContainer, clock: Clock
) -> None:
    await store.create(conversation(expires_in=60))
    clock.now += 60
    container.calls.clear()

    assert await store.delete("oid-1", "conv-1") is False

    assert container.methods() == ["read_item", "delete_item"]
    assert container.items == {}


async def test_delete_without_an_etag_of_a_live_conversation_removes_it(
    store: CosmosStore, container: FakeContainer
) -> None:
    await store.create(conversation())
    assert await store.delete("oid-1", "conv-1") is True
    assert container.items == {}


async def test_a_stale_etag_is_a_version_conflict(store: CosmosStore, container: FakeContainer) -> None:
    etag = await store.create(conversation(version=1))
    container.items[KEY]["_etag"] = "changed-by-another-replica"

    with pytest.raises(VersionConflict):
        await store.replace(conversation(version=2), if_match=etag)
    assert container.items[KEY]["version"] == 1


@pytest.mark.parametrize("status", [404, 412])
async def test_a_refused_conditional_write_is_a_version_conflict(
    store: CosmosStore, container: FakeContainer, status: int
) -> None:
    etag = await store.create(conversation(version=1))
    container.fail["replace_item"] = http_error(status)
    with pytest.raises(VersionConflict):
        await store.replace(conversation(version=2), if_match=etag)


@pytest.mark.parametrize("etag", ["1", "", "not-a-number/etag", "1700000100.0/"])
async def test_an_etag_this_store_did_not_issue_is_a_version_conflict_without_a_request(
    store: CosmosStore, container: FakeContainer, etag: str
) -> None:
    await store.create(conversation(version=1))
    container.calls.clear()
    with pytest.raises(VersionConflict):
        await store.replace(conversation(version=2), if_match=etag)
    assert container.calls == []


async def test_a_conflict_on_create_of_a_live_conversation_is_a_version_conflict(
    store: CosmosStore, container: FakeContainer
) -> None:
    await store.create(conversation(version=1))
    with pytest.raises(VersionConflict):
        await store.create(conversation(version=1, answer="another writer's first turn"))
    assert container.items[KEY]["turns"][0]["a"] == "A service."


async def test_create_over_an_expired_item_not_yet_purged_replaces_it_conditionally(
    store: CosmosStore, container: FakeContainer, clock: Clock
) -> None:
    await store.create(conversation(expires_in=60))
    stale = container.etag()
    clock.now += 60
    container.calls.clear()

    fresh = conversation(answer="fresh")
    etag = await store.create(fresh)

    assert container.methods() == ["create_item", "read_item", "replace_item"]
    assert container.calls[-1][1]["etag"] == stale
    assert etag == await etag_read(store)


async def test_an_expired_item_not_yet_purged_reads_as_missing_and_cannot_be_replaced(
    store: CosmosStore, container: FakeContainer, clock: Clock
) -> None:
    etag = await store.create(conversation(expires_in=60))
    clock.now += 60
    assert await store.get("oid-1", "conv-1") is None
    container.calls.clear()
    with pytest.raises(VersionConflict):
        await store.replace(conversation(version=2), if_match=etag)
    assert container.calls == []


# --- lost responses ----------------------------------------------------------------------------


async def test_a_create_applied_but_answered_by_the_sdks_retry_with_409_is_not_a_conflict(
    store: CosmosStore, container: FakeContainer
) -> None:
    container.lose.add("create_item")

    etag = await store.create(conversation(version=1))

    assert container.methods() == ["create_item", "read_item"]
    assert etag == await etag_read(store)


async def test_a_replace_applied_but_answered_by_the_sdks_retry_with_412_is_not_a_conflict(
    store: CosmosStore, container: FakeContainer
) -> None:
    first = await store.create(conversation(version=1))
    container.lose.add("replace_item")
    container.calls.clear()

    etag = await store.replace(conversation(version=2), if_match=first)

    assert container.methods() == ["replace_item", "read_item"]
    assert container.items[KEY]["version"] == 2
    assert etag == await etag_read(store)


# --- delete_all --------------------------------------------------------------------------------


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
    # The read is of the user's quota item (none here), made before any delete.
    assert container.methods() == ["read_item"] + ["delete_item"] * 3
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


async def test_a_404_where_none_is_expected_is_unavailable(
    store: CosmosStore, container: FakeContainer
) -> None:
    # The container itself gone: a readiness failure, not an uncaught SDK error.
    container.fail["read"] = http_error(404)
    with pytest.raises(Unavailable, match="HTTP 404"):
        await store.check()


async def test_a_connection_failure_is_unavailable(store: CosmosStore, container: FakeContainer) -> None:
    container.fail["read"] = ServiceRequestError(f"Cannot connect to host ({SECRET})")
    with pytest.raises(Unavailable) as raised:
        await store.check()
    assert raised.value.message == "The conversation store cannot be reached; retry shortly."
    assert SECRET not in str(raised.value)


async def test_check_does_not_retry_connections(store: CosmosStore, container: FakeContainer) -> None:
    await store.check()
    assert container.calls == [("read", {"retry_connect": 0})]


async def test_nothing_logs_the_account_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, container: FakeContainer
) -> None:
    import azure.cosmos.aio

    opened_with: list[tuple[Any, ...]] = []

    class FakeClient:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            opened_with.append(args)

        def get_database_client(self, name: str) -> Any:
            return self

        def get_container_client(self, name: str) -> FakeContainer:
            return container

        async def close(self) -> None:
            pass

    monkeypatch.setattr(azure.cosmos.aio, "CosmosClient", FakeClient)
    settings = Settings(
        store="cosmos",
        cosmos_endpoint="https://example.documents.azure.com:443/",
        cosmos_key=SecretStr(SECRET),
    )
    caplog.set_level(logging.DEBUG)
    container.fail["read"] = ServiceRequestError(f"Cannot connect with key {SECRET}")
    store = await CosmosStore.open(settings, ttl_seconds=settings.history_ttl_seconds)
    try:
        for status in (429, 500, 403):
            container.fail["read_item"] = http_error(status, authorization=SECRET)
            with pytest.raises(Unavailable):
                await store.get("oid-1", "conv-1")
    finally:
        await store.aclose()

    assert opened_with[0][1] == SECRET
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("app."))
    assert "not reachable at start-up" in logged
    assert all(f"HTTP {status}" in logged for status in (429, 500, 403))
    assert SECRET not in caplog.text


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
        "import app.main, app.stores.cosmos\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'azure' or m.startswith('azure.'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []
