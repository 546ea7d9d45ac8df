"""The store contract run against the stores that need no cloud: memory and SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.domain.ports import ConversationStore
from app.stores.memory import MemoryStore
from app.stores.sqlite import SqliteStore

from .quota_contract import QuotaContract
from .store_contract import FakeClock, StoreContract


class TestLocalStores(StoreContract, QuotaContract):
    @pytest.fixture(params=["memory", "sqlite"])
    async def store(
        self, request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
    ) -> AsyncIterator[ConversationStore]:
        opened: ConversationStore
        if request.param == "memory":
            opened = MemoryStore(clock)
        else:
            opened = await SqliteStore.open(tmp_path / "data" / "conversations.db", clock)
        yield opened
        await opened.aclose()
