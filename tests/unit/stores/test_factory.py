"""`open_store` opens the store the settings name, and loads only that one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings
from app.stores.factory import open_store
from app.stores.memory import MemoryStore
from app.stores.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


async def test_memory_is_a_memory_store() -> None:
    store = await open_store(Settings(store="memory"))
    assert isinstance(store, MemoryStore)
    await store.aclose()


async def test_sqlite_is_a_file_under_the_data_folder(tmp_path: Path) -> None:
    store = await open_store(Settings(store="sqlite", data_dir=tmp_path / "data"))
    try:
        assert isinstance(store, SqliteStore)
        await store.check()
        assert (tmp_path / "data" / "conversations.sqlite3").is_file()
    finally:
        await store.aclose()


async def test_cosmos_is_opened_with_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.stores.cosmos import CosmosStore

    opened: list[Settings] = []

    async def fake_open(cls: type[CosmosStore], settings: Settings) -> CosmosStore:
        opened.append(settings)
        return CosmosStore(object())

    monkeypatch.setattr(CosmosStore, "open", classmethod(fake_open))
    settings = Settings(store="cosmos", cosmos_endpoint="https://anvil.documents.azure.com:443/")
    assert isinstance(await open_store(settings), CosmosStore)
    assert opened == [settings]


def test_opening_sqlite_loads_neither_the_cosmos_store_nor_the_azure_sdk(tmp_path: Path) -> None:
    script = (
        "import asyncio, json, sys\n"
        "from app.settings import Settings\n"
        "from app.stores.factory import open_store\n"
        "async def main():\n"
        f"    store = await open_store(Settings(store='sqlite', data_dir={str(tmp_path)!r}))\n"
        "    await store.aclose()\n"
        "asyncio.run(main())\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('azure', 'app.stores.cosmos')))))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == []
