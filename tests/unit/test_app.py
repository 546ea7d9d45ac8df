"""`create_app`: one application whose lifespan opens and closes everything, and tunes nothing global."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from app.domain.principal import Principal
from app.main import create_app
from app.runtime import Runtime
from app.settings import Settings

pytestmark = pytest.mark.anyio


async def test_the_lifespan_yields_the_runtime_and_leaves_the_collector_alone(tmp_path: Path) -> None:
    frozen, thresholds, enabled = gc.get_freeze_count(), gc.get_threshold(), gc.isenabled()
    app = create_app(Settings(store="sqlite", answer_engine="echo", data_dir=tmp_path))
    async with app.router.lifespan_context(app) as state:
        runtime = state["runtime"]
        assert isinstance(runtime, Runtime)
        alice = Principal(oid="alice", tid="tenant", scopes=frozenset(), expires_at=0.0)
        assert (await runtime.conversations.list(alice, limit=1)).items == ()
    assert (gc.get_freeze_count(), gc.get_threshold(), gc.isenabled()) == (frozen, thresholds, enabled)
    with pytest.raises(RuntimeError, match="closed"):  # the store was closed with the lifespan
        await runtime.service.store.check()
