"""Servers shared by the regression tests of one kind: the clusters deletes race on, the front
door with short deadlines, and a corpus holding every kind of file that must be skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.azurite import azurite_fixture
from support.corpus_files import make_corpus, make_outside
from support.cosmos import CosmosServer, run_cosmos_server
from support.file_modes import bound_by_file_modes
from support.history_cluster import Cluster, model_env, model_server, write_corpus
from support.openai_server import FakeOpenAI
from support.races import SETUPS, Setup
from support.raw_http import front_door_server

__all__ = ["azurite_fixture"]


@pytest.fixture(scope="package")
def fake() -> Iterator[FakeOpenAI]:
    with model_server(0.0) as server:
        yield server


@pytest.fixture(scope="package")
def cosmos() -> Iterator[CosmosServer]:
    with run_cosmos_server() as server:
        yield server


@pytest.fixture(scope="package", params=SETUPS, ids=lambda s: s.name)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI
) -> Iterator[Cluster]:
    setup: Setup = request.param
    folder = tmp_path_factory.mktemp(f"races-{setup.name}")
    env = model_env(fake, write_corpus(folder / "corpus"))
    if setup.store == "cosmos":
        env.update(request.getfixturevalue("cosmos").env())
    with Cluster(setup.store, setup.processes, folder / "data", env) as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=100, keepalive_expiry=2.0)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        yield client


@pytest.fixture(scope="package")
def front_door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    # Fresh: the header tests read this server's memory from /proc/<pid>.
    with front_door_server(tmp_path_factory.mktemp("front-door"), fresh=True) as running:
        yield running


@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilServer, Path, Path]]:
    """A server over a corpus of one readable document, a folder link inside it, and every kind of
    file it must skip; with the corpus folder and the folder outside it."""
    base = tmp_path_factory.mktemp("corpus-files")
    corpus, outside = base / "corpus", base / "outside"
    (corpus / "guide").mkdir(parents=True)
    outside.mkdir()
    (corpus / "guide" / "widgets.md").write_text(
        "# Widgets\nThe frobnicator turns widgets.\n", encoding="utf-8"
    )
    (corpus / "latest").symlink_to("guide", target_is_directory=True)
    (outside / "secret.md").write_text("# Secret\nThe launch code is zebra.\n", encoding="utf-8")
    (corpus / "passwd.md").symlink_to("/etc/passwd")
    (corpus / "secret.md").symlink_to(outside / "secret.md")
    (corpus / "elsewhere").symlink_to(outside, target_is_directory=True)
    (corpus / "latin1.md").write_bytes(b"# Notes\nThe caf\xe9 sells quokkas.\n")
    (corpus / "locked.md").write_text("# Locked\nThe vault holds narwhals.\n", encoding="utf-8")
    (corpus / "locked.md").chmod(0)
    try:
        with run_anvil(
            base / "data", {"ANVIL_CORPUS_DIR": str(corpus)}, prefix=bound_by_file_modes()
        ) as server:
            yield server, corpus, outside
    finally:
        (corpus / "locked.md").chmod(0o600)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return make_corpus(tmp_path)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    return make_outside(tmp_path)
