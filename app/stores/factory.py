"""The conversation store the settings name (`ANVIL_STORE`), opened.

Each store is imported only when chosen, so a process on SQLite never loads the Azure SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.domain.ports import ConversationStore
    from app.settings.stores import StoreSettings


async def open_store(settings: StoreSettings, *, ttl_seconds: int) -> ConversationStore:
    """The configured conversation store, opened: memory, SQLite under the data folder, or Cosmos DB
    (which creates a missing container with `ttl_seconds`, the conversations' lifetime, as its TTL)."""
    if settings.store == "memory":
        from app.stores.memory import MemoryStore

        return MemoryStore()
    if settings.store == "cosmos":
        from app.stores.cosmos import CosmosStore

        return await CosmosStore.open(settings, ttl_seconds=ttl_seconds)
    from app.stores.sqlite import SqliteStore

    return await SqliteStore.open(settings.data_dir / "conversations.sqlite3")
