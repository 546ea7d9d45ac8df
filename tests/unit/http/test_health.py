"""The probes: `/healthz` says the process is alive, `/readyz` whether its dependencies answer."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from support.asgi import client

from app.domain.ports import IndexStatus
from app.http.health import EMPTY_CORPUS, liveness, readiness
from app.main import create_app
from app.runtime import Runtime
from app.settings import Settings

pytestmark = pytest.mark.anyio


def runtime(tmp_path: Path, probes: dict[str, Any], documents: int | None = None) -> Runtime:
    """A runtime carrying only what the probes read: its readiness checks and its index (none
    when `documents` is None, as for the echo engine)."""
    served = IndexStatus(
        "2e53917a",
        passages=40,
        documents=documents or 0,
        built_at=time.time() - 90,
        embedder="local:multilingual-e5-small-q4",
        embedded=25,
        name="the handbook",
        description="leave, pay and travel",
    )
    return Runtime(
        service=cast(Any, None),
        conversations=cast(Any, None),
        verifier=None,
        readiness=probes,
        knowledge=None if documents is None else cast(Any, SimpleNamespace(status=lambda: served)),
    )


async def ok() -> None:
    pass


async def down() -> None:
    raise ConnectionRefusedError("store at 10.0.0.4:443 refused: secret=abc")


def body(response: Any) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(bytes(response.body))
    return decoded


def test_liveness_says_ok() -> None:
    assert liveness() == {"status": "ok"}


async def test_ready_when_every_probe_answers(tmp_path: Path) -> None:
    response = await readiness(runtime(tmp_path, {"store": ok, "signing-keys": ok}))
    assert response.status_code == 200
    assert body(response) == {"status": "ok", "checks": {"store": "ok", "signing-keys": "ok"}}


async def test_a_failing_probe_is_named_by_its_error_type_and_nothing_it_said(tmp_path: Path) -> None:
    response = await readiness(runtime(tmp_path, {"store": down, "signing-keys": ok}))
    assert response.status_code == 503
    assert body(response) == {
        "status": "unavailable",
        "checks": {"store": "unavailable: ConnectionRefusedError", "signing-keys": "ok"},
    }


async def test_draining_is_unavailable_at_once_without_probing(tmp_path: Path) -> None:
    async def never() -> None:
        raise AssertionError("a draining process probes nothing")

    response = await readiness(runtime(tmp_path, {"store": never}), draining=True)
    assert response.status_code == 503
    assert body(response) == {"status": "draining", "checks": {}}


@pytest.mark.parametrize(("documents", "warned"), [(0, True), (3, False), (None, False)])
async def test_an_empty_corpus_is_a_warning_not_a_failure(
    tmp_path: Path, documents: int | None, warned: bool
) -> None:
    response = await readiness(runtime(tmp_path, {"store": ok}, documents))
    assert response.status_code == 200
    assert body(response).get("warnings") == ([EMPTY_CORPUS] if warned else None)


async def test_the_index_served_is_named_with_its_size_and_age(tmp_path: Path) -> None:
    said = body(await readiness(runtime(tmp_path, {"store": ok}, 3)))["index"]
    assert said == {
        "version": "2e53917a",
        "passages": 40,
        "documents": 3,
        "ageSeconds": said["ageSeconds"],
        "embedder": "local:multilingual-e5-small-q4",
        "embedded": 25,
        "behindSeconds": None,
        "name": "the handbook",
        "description": "leave, pay and travel",
    }
    assert 89 <= said["ageSeconds"] <= 120


async def test_a_replica_behind_the_newest_version_it_has_seen_says_for_how_long(tmp_path: Path) -> None:
    behind = IndexStatus("2e53917a", passages=40, documents=3, built_at=None, behind=41.6)
    rt = runtime(tmp_path, {"store": ok}, 3)
    rt = dataclasses.replace(rt, knowledge=cast(Any, SimpleNamespace(status=lambda: behind)))
    response = await readiness(rt)
    assert response.status_code == 200 and body(response)["index"]["behindSeconds"] == 42


async def test_an_index_that_cannot_describe_itself_makes_readiness_unavailable_not_500(
    tmp_path: Path,
) -> None:
    def status() -> IndexStatus:
        raise ValueError("time data '2026-13-01T00:00:00Z' does not match format")

    rt = runtime(tmp_path, {"store": ok}, 3)
    rt = dataclasses.replace(rt, knowledge=cast(Any, SimpleNamespace(status=status)))
    response = await readiness(rt)
    assert response.status_code == 503
    assert body(response) == {
        "status": "unavailable",
        "checks": {"store": "ok", "index": "unavailable: ValueError"},
    }


async def test_the_probes_are_served_without_sign_in_and_answer_head(tmp_path: Path) -> None:
    app = create_app(Settings(auth_mode="dev", store="memory", answer_engine="echo", data_dir=tmp_path))
    async with client(app) as http:
        alive = await http.get("/healthz")
        assert (alive.status_code, alive.json()) == (200, {"status": "ok"})
        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["checks"] == {"store": "ok"}
        head = await http.head("/readyz")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == ready.headers["content-length"]
