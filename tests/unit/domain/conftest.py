"""The AskService under test and its doubles, fresh for each test."""

from __future__ import annotations

import pytest
from support.ask_doubles import CountingStore, FakeClock
from support.scripted_engine import ScriptedEngine

from app.domain.ask import AskService
from app.stores.memory import MemoryStore


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def store(memory: MemoryStore) -> CountingStore:
    return CountingStore(memory)


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
def service(store: CountingStore, engine: ScriptedEngine, clock: FakeClock) -> AskService:
    return AskService(store, engine, clock=clock)
