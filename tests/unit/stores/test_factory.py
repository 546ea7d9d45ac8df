"""`open_store` opens the store its part of the settings names, and loads only that one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.settings.stores import StoreSettings
from app.stores.factory import open_store
from app.stores.memory import MemoryStore
from app.stores.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


async def test_memory_is_a_memory_store() -> None:
    store = await open_store(StoreSettings(store="memory"), ttl_seconds=60)
    assert isinstance(store, MemoryStore)
    await store.aclose()


async def test_sqlite_is_a_file_under_the_data_folder(tmp_path: Path) -> None:
    store = await open_store(StoreSettings(store="sqlite", data_dir=tmp_path / "data"), ttl_seconds=60)
    try:
        assert isinstance(store, SqliteStore)
        await store.check()
        assert (tmp_path / "data" / "conversations.sqlite3").is_file()
    finally:
        await store.aclose()


async def test_cosmos_is_opened_with_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.stores.cosmos import CosmosStore

    opened: list[tuple[StoreSettings, dict[str, Any]]] = []

    async def fake_open(cls: type[CosmosStore], settings: StoreSettings, **options: Any) -> CosmosStore:
        opened.append((settings, options))
        return CosmosStore(object())

    monkeypatch.setattr(CosmosStore, "open", classmethod(fake_open))
    settings = StoreSettings(store="cosmos", cosmos_endpoint="https://anvil.documents.azure.com:443/")
    assert isinstance(await open_store(settings, ttl_seconds=600), CosmosStore)
    assert opened == [(settings, {"ttl_seconds": 600})]


def test_opening_sqlite_loads_neither_the_cosmos_store_nor_the_azure_sdk(tmp_path: Path) -> None:
    script = (
        "import asyncio, json, sys\n"
        "from app.settings.stores import StoreSettings\n"
        "from app.stores.factory import open_store\n"
        "async def main():\n"
        f"    store = await open_store(StoreSettings(data_dir={str(tmp_path)!r}), ttl_seconds=60)\n"
        "    await store.aclose()\n"
        "asyncio.run(main())\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('azure', 'app.stores.cosmos')))))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []
