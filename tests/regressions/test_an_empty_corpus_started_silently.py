"""An empty corpus folder (or one holding only files that are skipped) started without a word and
answered "I found nothing" to every question. Fixed in 0.4.2: a warning at start-up naming the
folder, and a line in `/readyz`'s body."""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.corpus_files import headers, warnings

from app.engines.retrieval.engine import NO_MATCH_ANSWER
from app.http.health import EMPTY_CORPUS
from app.knowledge.served import open_served
from app.settings import Settings

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links as POSIX has them")


def test_a_corpus_with_documents_says_nothing_in_readyz(served: tuple[AnvilServer, Path, Path]) -> None:
    server, _, _ = served
    ready = httpx.get(f"{server.url}/readyz")
    assert ready.status_code == 200 and "warnings" not in ready.json()


@pytest.mark.parametrize("contents", ["nothing", "only skipped files"])
def test_an_empty_corpus_starts_warning_and_readyz_says_so(tmp_path: Path, contents: str) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    if contents == "only skipped files":
        (corpus / "bad.md").write_bytes(b"\xff\xfe")
        (corpus / "passwd.md").symlink_to("/etc/passwd")
    with run_anvil(tmp_path / "data", {"ANVIL_CORPUS_DIR": str(corpus)}) as server:
        ready = httpx.get(f"{server.url}/readyz")
        assert ready.status_code == 200
        said = ready.json()
        assert said["warnings"] == [EMPTY_CORPUS] and said["index"]["documents"] == 0
        assert (said["status"], said["checks"]) == ("ok", {"store": "ok"})
        asked = httpx.post(
            f"{server.url}/api/ask", json={"question": "How do I start?"}, headers=headers(server)
        )
        assert asked.status_code == 200 and asked.json()["answer"] == NO_MATCH_ANSWER
        assert (
            f"corpus: {corpus} holds no document with text, so every question will be answered "
            "that nothing was found: add documents there, or set ANVIL_CORPUS_DIR"
        ) in warnings(server)


async def served_documents(corpus: Path, data: Path) -> int:
    """How many documents the index served from `corpus` holds."""
    settings = Settings(corpus_dir=corpus, data_dir=data, embeddings="none")
    async with AsyncExitStack() as stack:
        served = await open_served(settings, None, data / "cache", stack)
        return served.facts().documents


@pytest.mark.anyio
async def test_the_served_index_counts_its_documents_and_warns_when_there_are_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "empty.md").write_text("---\ntitle: Nothing here\n---\n", encoding="utf-8")
    (corpus / "bad.md").write_bytes(b"\xff")

    assert await served_documents(corpus, tmp_path / "data") == 0
    (warning,) = [r.getMessage() for r in caplog.records if "holds no" in r.message]
    assert warning == (
        f"corpus: {corpus} holds no document with text, so every question will be "
        "answered that nothing was found: add documents there, or set ANVIL_CORPUS_DIR"
    )

    caplog.clear()
    (corpus / "bad.md").write_text("# Back\nNow readable.\n", encoding="utf-8")
    assert await served_documents(corpus, tmp_path / "data") == 1
    assert not [r for r in caplog.records if "holds no" in r.message]
