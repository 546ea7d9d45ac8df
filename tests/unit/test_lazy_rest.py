"""The REST app (FastAPI) is built on first use; probes and sign-in discovery never need it."""

from __future__ import annotations

import gc
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from app.adapters.auth.dev import DevIssuer
from app.settings import Settings
from app.main import Anvil, create_app, settle_heap

pytestmark = pytest.mark.anyio

BASE = "http://127.0.0.1:8000"
DIRECT_GETS = [
    "/healthz",
    "/readyz",
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp",
]


@pytest.fixture(params=["dev", "none"])
async def anvil(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Anvil]:
    settings = Settings(auth_mode=request.param, store="memory", answer_engine="echo", data_dir=tmp_path)
    app = create_app(settings)
    async with app._lifespan(app):
        yield app


async def get(app: object, path: str, method: str = "GET") -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:  # type: ignore[arg-type]
        return await client.request(method, path)


async def test_probes_discovery_and_mcp_are_answered_without_building_the_rest_app(anvil: Anvil) -> None:
    for path in DIRECT_GETS:
        await get(anvil, path)
    await list_tools(anvil)
    assert anvil._api is None


async def list_tools(anvil: Anvil) -> None:
    headers = {"Accept": "application/json, text/event-stream"}
    if anvil.settings.auth_mode == "dev":
        headers["Authorization"] = f"Bearer {DevIssuer.load_or_create(anvil.settings.data_dir).mint('alice')}"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=anvil), base_url=BASE) as client:
        reply = await client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers
        )
    assert reply.status_code == 200 and reply.json()["result"]["tools"]


async def test_mcp_calls_are_answered_while_the_rest_app_is_being_built(
    anvil: Anvil, monkeypatch: pytest.MonkeyPatch
) -> None:
    building, release = threading.Event(), threading.Event()
    build = anvil._build_api

    def slow_build() -> object:
        building.set()
        release.wait(10)
        return build()

    monkeypatch.setattr(anvil, "_build_api", slow_build)
    async with anyio.create_task_group() as group:
        group.start_soon(get, anvil, "/openapi.json")
        await anyio.to_thread.run_sync(building.wait, 10)
        await list_tools(anvil)  # answered while the build is still held
        assert anvil._api is None
        release.set()
    assert anvil._api is not None


@pytest.mark.parametrize("path", DIRECT_GETS)
async def test_direct_answers_are_the_rest_apps_answers(anvil: Anvil, path: str) -> None:
    direct = await get(anvil, path)
    assert anvil._api is None
    routed = await get(anvil.api, path)  # the REST app itself, as it answered before
    assert (direct.status_code, direct.content) == (routed.status_code, routed.content)
    for header in ("content-type", "content-length", "cache-control"):
        assert direct.headers.get(header) == routed.headers.get(header)


async def test_the_first_rest_request_builds_the_app_once(
    anvil: Anvil, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = []
    build = anvil._build_api

    def counted() -> object:
        builds.append(1)
        return build()

    monkeypatch.setattr(anvil, "_build_api", counted)
    statuses: list[int] = []

    async def fetch() -> None:
        statuses.append((await get(anvil, "/openapi.json")).status_code)

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(fetch)
    assert statuses == [200] * 5
    assert builds == [1]
    assert (await get(anvil, "/healthz")).status_code == 200


async def test_paths_without_a_direct_answer_reach_the_rest_app(anvil: Anvil) -> None:
    head = await httpx.AsyncClient(transport=httpx.ASGITransport(app=anvil), base_url=BASE).head("/healthz")
    assert (
        head.status_code
        == (
            await httpx.AsyncClient(transport=httpx.ASGITransport(app=anvil.api), base_url=BASE).head(
                "/healthz"
            )
        ).status_code
    )
    missing = await get(anvil, "/no-such-path")
    assert missing.status_code == 404


def test_settling_the_heap_turns_collection_back_on() -> None:
    was_enabled, thresholds = gc.isenabled(), gc.get_threshold()
    gc.disable()  # as `anvil serve` starts
    try:
        settle_heap()
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        if not was_enabled:
            gc.disable()
