"""The conversation store the settings name (`ANVIL_STORE`), opened.

Each store is imported only when chosen, so a process on SQLite never loads the Azure SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.domain.ports import ConversationStore
    from app.settings import Settings


async def open_store(settings: Settings) -> ConversationStore:
    """The configured conversation store, opened: memory, SQLite under the data folder, or Cosmos DB."""
    if settings.store == "memory":
        from app.stores.memory import MemoryStore

        return MemoryStore()
    if settings.store == "cosmos":
        from app.stores.cosmos import CosmosStore

        return await CosmosStore.open(settings)
    from app.stores.sqlite import SqliteStore

    return await SqliteStore.open(settings.data_dir / "conversations.sqlite3")
