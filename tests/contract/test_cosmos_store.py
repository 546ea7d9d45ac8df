"""The store contract run against the Cosmos DB store and a real Cosmos DB-compatible server.

One server for the module; every test gets a container of its own, created by the store.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from pydantic import SecretStr
from support.cosmos import CosmosServer, run_cosmos_server

from app.domain.ports import ConversationStore
from app.settings import Settings
from app.stores.cosmos import CosmosStore

from .quota_contract import QuotaContract
from .store_contract import FakeClock, StoreContract, make_conversation, next_version


@pytest.fixture(scope="module")
def cosmos_server() -> Iterator[CosmosServer]:
    with run_cosmos_server() as server:
        yield server


def cosmos_settings(server: CosmosServer, container: str) -> Settings:
    return Settings(
        store="cosmos",
        cosmos_endpoint=server.endpoint,
        cosmos_key=SecretStr(server.key),
        cosmos_container=container,
        cosmos_create_if_missing=True,
    )


class TestCosmosStore(StoreContract, QuotaContract):
    @pytest.fixture
    async def store(self, cosmos_server: CosmosServer, clock: FakeClock) -> AsyncIterator[ConversationStore]:
        settings = cosmos_settings(cosmos_server, f"contract-{uuid.uuid4().hex[:12]}")
        opened = await CosmosStore.open(settings, clock, ttl_seconds=settings.history_ttl_seconds)
        yield opened
        await opened.aclose()


# --- what only the Cosmos DB store has to get right ---------------------------------------------


@pytest.fixture
async def cosmos_store(cosmos_server: CosmosServer, clock: FakeClock) -> AsyncIterator[CosmosStore]:
    settings = cosmos_settings(cosmos_server, f"own-{uuid.uuid4().hex[:12]}")
    opened = await CosmosStore.open(settings, clock, ttl_seconds=settings.history_ttl_seconds)
    yield opened
    await opened.aclose()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.mark.anyio
async def test_the_container_it_creates_is_partitioned_by_oid_with_ttl_on(
    cosmos_server: CosmosServer,
) -> None:
    from azure.cosmos.aio import CosmosClient

    settings = cosmos_settings(cosmos_server, f"created-{uuid.uuid4().hex[:12]}")
    store = await CosmosStore.open(settings, ttl_seconds=settings.history_ttl_seconds)
    await store.aclose()
    async with CosmosClient(cosmos_server.endpoint, cosmos_server.key) as client:
        container = client.get_database_client(settings.cosmos_database).get_container_client(
            settings.cosmos_container
        )
        properties = await container.read()
    assert properties["partitionKey"]["paths"] == ["/oid"]
    assert properties["defaultTtl"] == settings.history_ttl_seconds


@pytest.mark.anyio
async def test_open_refuses_a_missing_container(cosmos_server: CosmosServer) -> None:
    settings = cosmos_settings(cosmos_server, "never-created").model_copy(
        update={"cosmos_create_if_missing": False}
    )
    with pytest.raises(RuntimeError, match="does not exist"):
        await CosmosStore.open(settings, ttl_seconds=settings.history_ttl_seconds)


@pytest.mark.anyio
async def test_open_refuses_a_container_partitioned_by_another_path(cosmos_server: CosmosServer) -> None:
    from azure.cosmos import PartitionKey
    from azure.cosmos.aio import CosmosClient

    settings = cosmos_settings(cosmos_server, f"by-id-{uuid.uuid4().hex[:12]}")
    async with CosmosClient(cosmos_server.endpoint, cosmos_server.key) as client:
        database = await client.create_database_if_not_exists(settings.cosmos_database)
        await database.create_container(settings.cosmos_container, partition_key=PartitionKey("/id"))
    with pytest.raises(RuntimeError, match="must have partition key /oid"):
        await CosmosStore.open(settings, ttl_seconds=settings.history_ttl_seconds)


@pytest.mark.anyio
async def test_pages_split_a_long_run_of_equal_timestamps_in_conversation_id_order(
    cosmos_store: CosmosStore, clock: FakeClock
) -> None:
    # TOP cuts the run anywhere; the store must still page it by conversationId.
    ids = ["e", "b", "d", "a", "c"]
    for cid in ids:
        await cosmos_store.create(make_conversation(clock, conversation_id=cid))
    clock.advance(1)
    await cosmos_store.create(make_conversation(clock, conversation_id="newest"))

    pages = []
    cursor = None
    while True:
        page = await cosmos_store.list("oid-1", "tenant-1", limit=2, cursor=cursor)
        pages.append([s.conversation_id for s in page.items])
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == [["newest", "a"], ["b", "c"], ["d", "e"]]


@pytest.mark.anyio
async def test_delete_all_counts_only_live_conversations(cosmos_store: CosmosStore, clock: FakeClock) -> None:
    await cosmos_store.create(make_conversation(clock, conversation_id="stale", expires_at=clock.now + 5))
    await cosmos_store.create(make_conversation(clock, conversation_id="live"))
    clock.advance(10)
    assert await cosmos_store.delete_all("oid-1", "tenant-1") == 1
    assert await cosmos_store.delete("oid-1", "stale") is False


@pytest.mark.anyio
async def test_a_turn_is_one_read_and_one_write_and_a_delete_after_a_read_is_one_request(
    cosmos_server: CosmosServer, cosmos_store: CosmosStore, clock: FakeClock
) -> None:
    first = make_conversation(clock)
    await cosmos_store.create(first)
    cosmos_server.reset()

    stored = await cosmos_store.get("oid-1", "conv-1")
    assert stored is not None
    etag = await cosmos_store.replace(next_version(stored.conversation, clock), if_match=stored.etag)

    counts = cosmos_server.counts()
    assert (counts["read"], counts["replace"], counts["write"], counts["query"]) == (1, 1, 1, 0)
    cosmos_server.reset()
    assert await cosmos_store.delete("oid-1", "conv-1", if_match=etag) is True
    counts = cosmos_server.counts()
    assert (counts["read"], counts["delete"], counts["write"]) == (0, 1, 1)


@pytest.mark.anyio
@pytest.mark.parametrize("op", ["create", "replace"])
async def test_a_write_applied_but_answered_503_is_stored_once_and_not_a_conflict(
    cosmos_server: CosmosServer, cosmos_store: CosmosStore, clock: FakeClock, op: str
) -> None:
    first = make_conversation(clock)
    read = await cosmos_store.create(first) if op == "replace" else None
    cosmos_server.reset()
    # Cosmos DB applies the write but its answer is lost; the SDK sends it again.
    cosmos_server.inject(op, 503, count=1, when="after")

    if read is None:
        written, etag = first, await cosmos_store.create(first)
    else:
        written = next_version(first, clock)
        etag = await cosmos_store.replace(written, if_match=read)

    assert cosmos_server.counts()[op] == 2
    assert await cosmos_store.get("oid-1", "conv-1") == (written, etag)


@pytest.mark.anyio
async def test_traced_operations_carry_the_request_charge_cosmos_reports(cosmos_server: CosmosServer) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.telemetry.instruments import Telemetry
    from app.telemetry.traced import TracedStore

    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(
        tracer_provider.get_tracer("anvil"),
        MeterProvider(metric_readers=[metrics]).get_meter("anvil"),
        pseudonym_key=b"k" * 32,
    )
    clock = FakeClock()
    settings = cosmos_settings(cosmos_server, f"charged-{uuid.uuid4().hex[:12]}")
    opened = await CosmosStore.open(settings, clock, ttl_seconds=settings.history_ttl_seconds)
    store = TracedStore(opened, telemetry, "cosmos")
    try:
        await store.create(make_conversation(clock))
        assert await store.get("oid-1", "conv-1") is not None
        assert await store.count("oid-1", "tenant-1") == 1
    finally:
        await store.aclose()
    charged = {
        s.name: (s.attributes or {}).get("azure.cosmosdb.operation.request_charge")
        for s in spans.get_finished_spans()
    }
    # The test server charges 1 request unit for every data request.
    assert charged == {"create conversations": 1.0, "get conversations": 1.0, "count conversations": 1.0}
    data = metrics.get_metrics_data()
    names = (
        {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
        if data
        else set()
    )
    assert "azure.cosmosdb.client.operation.request_charge" in names
