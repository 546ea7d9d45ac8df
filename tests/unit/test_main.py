"""`create_app`: one application whose lifespan opens and closes everything, and tunes nothing global."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from support.asgi import client

from app.domain.principal import Principal
from app.main import create_app
from app.runtime import Runtime
from app.settings import Settings
from app.stores.sqlite_schema import StartupError

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


async def test_readiness_fails_at_once_while_draining(tmp_path: Path) -> None:
    app = create_app(Settings(store="memory", answer_engine="echo", data_dir=tmp_path))
    async with client(app) as http:
        assert (await http.get("/readyz")).status_code == 200
        app.state.draining = True
        response = await http.get("/readyz")
        assert response.status_code == 503
        assert response.json() == {"status": "draining", "checks": {}}
        assert (await http.get("/healthz")).status_code == 200, "alive all the same"


async def test_a_failed_start_up_is_reported_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file")
    app = create_app(Settings(store="sqlite", answer_engine="echo", data_dir=tmp_path / "data"))
    sent: list[dict[str, object]] = []
    messages = iter([{"type": "lifespan.startup"}])

    async def receive() -> dict[str, object]:
        return next(messages)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    with pytest.raises(StartupError):
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)  # type: ignore[arg-type]
    (failed,) = [m for m in sent if m["type"] == "lifespan.startup.failed"]
    assert failed["message"] == (
        f"Anvil cannot start: cannot create the data folder {tmp_path / 'data'}: a file is in its place: "
        "set ANVIL_DATA_DIR to a folder Anvil can write to"
    )
