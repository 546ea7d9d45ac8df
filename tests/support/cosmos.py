"""Run the Cosmos DB-compatible test server (`cosmos_server.mjs`) and talk to its admin API; and
`FakeCosmos`, a container in memory for the tests the server cannot reach."""

from __future__ import annotations

import asyncio
import copy
import json
import random
import subprocess
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
from azure.cosmos.exceptions import (
    CosmosAccessConditionFailedError,
    CosmosHttpResponseError,
    CosmosResourceExistsError,
    CosmosResourceNotFoundError,
)

from support.anvil_server import stop

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE = REPO_ROOT / "node_modules" / ".bin" / "node"
LAUNCHER = Path(__file__).with_name("cosmos_server.mjs")
START_TIMEOUT = 30.0

#: The Cosmos DB emulator's well-known key. The test server accepts any key; this one looks real
#: to the SDK (a base64 HMAC key) and is public, so nothing secret ever appears in tests.
EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


def node_available() -> bool:
    """Whether `npm ci` has installed Node and the test server at the repository root."""
    return NODE.exists() and (REPO_ROOT / "node_modules" / "@vercel" / "cosmosdb-server").is_dir()


@dataclass
class CosmosServer:
    """A running test server: the Cosmos DB endpoint, and the admin API for counts and faults."""

    port: int
    admin_port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}/"

    @property
    def key(self) -> str:
        return EMULATOR_KEY

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def env(self, **extra: str) -> dict[str, str]:
        """`ANVIL_*` variables that point `anvil serve` at this server (creating the container)."""
        return {
            "ANVIL_STORE": "cosmos",
            "ANVIL_COSMOS_ENDPOINT": self.endpoint,
            "ANVIL_COSMOS_KEY": self.key,
            "ANVIL_COSMOS_CREATE_IF_MISSING": "true",
            **extra,
        }

    def counts(self) -> dict[str, int]:
        """Requests received since the last `reset`, by operation (read, query, write, ...)."""
        return dict(self._admin("GET", "/counts"))

    def reset(self) -> None:
        """Zero the counts and drop every pending fault."""
        self._admin("POST", "/reset")

    def inject(
        self,
        op: str,
        status: int,
        count: int = 1,
        *,
        retry_after_ms: int | None = None,
        when: str = "before",
        path: str | None = None,
    ) -> None:
        """Answer the next `count` requests of kind `op` with `status` (see `cosmos_server.mjs`)."""
        fault: dict[str, Any] = {"op": op, "status": status, "count": count, "when": when}
        if retry_after_ms is not None:
            fault["retryAfterMs"] = retry_after_ms
        if path is not None:
            fault["path"] = path
        self._admin("POST", "/faults", fault)

    def pending_faults(self) -> list[dict[str, Any]]:
        return list(self._admin("GET", "/faults"))

    def stop(self) -> None:
        """Stop the server now (later calls do nothing)."""
        _reap(self.process)

    def _admin(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(method, self.admin_url + path, json=body, timeout=5.0)
        response.raise_for_status()
        return response.json()


@contextmanager
def run_cosmos_server() -> Iterator[CosmosServer]:
    """Start the test server on free loopback ports; always stop it afterwards.

    Readiness is the launcher's first stdout line, printed once both ports listen.
    """
    if not node_available():
        raise RuntimeError(f"{NODE} is missing: run `npm ci` at the repository root")
    # stderr goes to a file: a pipe nobody reads could fill up and stall the server.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [str(NODE), str(LAUNCHER), "--exit-with-stdin"],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        try:
            ports = _first_line(process, log)
            yield CosmosServer(port=int(ports["port"]), admin_port=int(ports["adminPort"]), process=process)
        finally:
            _reap(process)


def _first_line(process: subprocess.Popen[bytes], log: IO[bytes]) -> dict[str, Any]:
    """The launcher's ports line; fails with its stderr if it exits or stays silent too long."""
    assert process.stdout is not None
    stdout = process.stdout
    line: list[bytes] = []
    reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    if not line or not line[0].strip():
        _reap(process)
        log.seek(0)
        raise RuntimeError(f"the Cosmos DB test server did not start:\n{log.read().decode(errors='replace')}")
    return dict(json.loads(line[0]))


def _reap(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        # Closing stdin is the launcher's signal to exit; terminate covers a stuck event loop.
        if process.stdin is not None and not process.stdin.closed:
            process.stdin.close()
        stop(process)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None and not stream.closed:
            stream.close()


# --- a container in memory ---------------------------------------------------------------------

NOW = 1_700_000_000.0
OID, TID = "oid-1", "tenant-1"

_ERRORS: dict[int, type[CosmosHttpResponseError]] = {
    404: CosmosResourceNotFoundError,
    409: CosmosResourceExistsError,
    412: CosmosAccessConditionFailedError,
}


def http_error(status: int) -> CosmosHttpResponseError:
    """The SDK's error for `status`, of the class the SDK raises for it."""
    error = _ERRORS.get(status, CosmosHttpResponseError)(  # type: ignore[no-untyped-call]
        status_code=status, message=f"status {status}"
    )
    error.headers = {}
    return error


class Clock:
    """A clock the tests move by hand."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class FakeCosmos:
    """One container as Cosmos DB keeps it: fresh `_etag`s on every write, conditions checked
    against the latest state. Reads and queries may answer from an older state (`lag`), as a
    replica behind the write region may; writes never do.

    `hold[(method, id)]` makes such a request wait for the event before it is applied (and sets
    `reached[(method, id)]` when it gets there). `lose[method]` applies the next such write and
    then fails it as the SDK's retry of it would (409 or 412).
    """

    def __init__(
        self, clock: Clock, rng: random.Random | None = None, *, lag: int = 0, limit: int = 0
    ) -> None:
        self.clock = clock
        self.rng = rng or random.Random(0)
        self.lag = lag
        self.limit = limit
        self.items: dict[str, dict[str, Any]] = {}
        self.history: list[dict[str, dict[str, Any]]] = [{}]
        self.calls: list[tuple[str, str]] = []
        self.hold: dict[tuple[str, str], asyncio.Event] = {}
        self.reached: dict[tuple[str, str], asyncio.Event] = {}
        self.lose: set[str] = set()
        self.stale_query: dict[str, dict[str, Any]] | None = None
        self.most_live = 0

    # --- what the store calls ------------------------------------------------------------------

    async def read_item(self, item: str, partition_key: str, **_: Any) -> dict[str, Any]:
        await self._enter("read_item", item)
        state = self._view()
        await self._travel()
        if item not in state or state[item]["oid"] != partition_key:
            raise http_error(404)
        return copy.deepcopy(state[item])

    async def create_item(self, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        await self._enter("create_item", body["id"])
        if body["id"] in self.items:
            await self._travel()
            raise http_error(409)
        return await self._store("create_item", body)

    async def replace_item(self, item: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        await self._enter("replace_item", item)
        if item not in self.items:
            await self._travel()
            raise http_error(404)
        if kwargs.get("etag") not in (None, self.items[item]["_etag"]):
            await self._travel()
            raise http_error(412)
        return await self._store("replace_item", body)

    async def delete_item(self, item: str, partition_key: str, **kwargs: Any) -> None:
        await self._enter("delete_item", item)
        if item not in self.items:
            await self._travel()
            raise http_error(404)
        if kwargs.get("etag") not in (None, self.items[item]["_etag"]):
            await self._travel()
            raise http_error(412)
        del self.items[item]
        self._written()
        await self._travel()

    def query_items(
        self, query: str, parameters: list[dict[str, Any]], partition_key: str, **_: Any
    ) -> AsyncIterator[Any]:
        values = {p["name"]: p["value"] for p in parameters}
        return self._rows(query, values, partition_key)

    # --- for the tests -------------------------------------------------------------------------

    def live(self) -> set[str]:
        """The user's live conversations now (placeholders and the quota item are not)."""
        now = self.clock()
        return {
            str(item["conversationId"])
            for item in self.items.values()
            if item.get("tid") == TID and not item.get("pending") and float(item["expiresAt"]) > now
        }

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]

    def vanish(self, item: str) -> None:
        """Remove an item behind the store's back, as Cosmos DB's TTL purge does."""
        del self.items[item]
        self._written()

    # --- inside --------------------------------------------------------------------------------

    async def _rows(self, query: str, values: dict[str, Any], partition: str) -> AsyncIterator[Any]:
        self.calls.append(("query_items", query))
        await self._travel()
        state = self.stale_query if self.stale_query is not None else self._view()
        rows = [
            copy.deepcopy(item)
            for item in state.values()
            if item["oid"] == partition
            and ("c.tid = @tid" not in query or item.get("tid") == values["@tid"])
            and ("c.expiresAt > @now" not in query or float(item.get("expiresAt", 0)) > values["@now"])
        ]
        await self._travel()
        if "COUNT(1)" in query:
            yield len(rows)
            return
        for row in rows:
            yield row

    async def _enter(self, method: str, item: str) -> None:
        self.calls.append((method, item))
        await self._travel()
        if (method, item) in self.hold:
            self.reached.setdefault((method, item), asyncio.Event()).set()
            await self.hold[(method, item)].wait()

    async def _travel(self) -> None:
        # A request or its answer on the wire: other calls may run meanwhile.
        for _ in range(self.rng.randint(0, 3)):
            await asyncio.sleep(0)

    def _view(self) -> dict[str, dict[str, Any]]:
        back = self.rng.randint(0, self.lag) if self.lag else 0
        return self.history[max(0, len(self.history) - 1 - back)]

    async def _store(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        stored = {**copy.deepcopy(body), "_etag": f'"{uuid.uuid4()}"', "_ts": int(self.clock())}
        self.items[body["id"]] = stored
        self._written()
        await self._travel()
        if method in self.lose:
            self.lose.discard(method)
            raise http_error(409 if method == "create_item" else 412)
        return copy.deepcopy(stored)

    def _written(self) -> None:
        self.history.append(copy.deepcopy(self.items))
        self.most_live = max(self.most_live, len(self.live()))
        assert not self.limit or len(self.live()) <= self.limit, f"over the limit: {sorted(self.live())}"
