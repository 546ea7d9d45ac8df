"""The corpus a real `anvil serve` reads: links out of the folder skipped, links inside it
followed, a file that is not UTF-8 or cannot be read skipped by name while the rest is served; and
an empty corpus said at start-up and in `/readyz`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.file_modes import bound_by_file_modes

from app.adapters.engines.retrieval import NO_MATCH_ANSWER
from app.http.health import EMPTY_CORPUS

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links and file modes as POSIX has them")


@pytest.fixture(scope="module")
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


def headers(server: AnvilServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token('reader')}"}


def fetch(server: AnvilServer, source: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/fetch", params={"source": source}, headers=headers(server))


def search(server: AnvilServer, text: str) -> list[str]:
    found = httpx.get(f"{server.url}/api/search", params={"searchText": text}, headers=headers(server))
    assert found.status_code == 200, found.text
    return [hit["source"] for hit in found.json()["results"]]


def warnings(server: AnvilServer) -> list[str]:
    logged = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    return [line["message"] for line in logged if line["level"] == "WARNING"]


@pytest.mark.parametrize("source", ["passwd.md", "secret.md", "elsewhere/secret.md"])
def test_fetch_cannot_read_through_a_link_out_of_the_corpus(
    served: tuple[AnvilServer, Path, Path], source: str
) -> None:
    server, _, _ = served
    response = fetch(server, source)
    assert response.status_code == 404, response.text
    assert "root:" not in response.text and "zebra" not in response.text


@pytest.mark.parametrize("text", ["root", "launch code zebra"])
def test_search_finds_nothing_behind_a_link_out_of_the_corpus(
    served: tuple[AnvilServer, Path, Path], text: str
) -> None:
    server, _, _ = served
    assert search(server, text) == []


def test_each_link_out_is_named_in_a_warning_at_start_up(served: tuple[AnvilServer, Path, Path]) -> None:
    server, corpus, outside = served
    logged = warnings(server)
    for link, target in [
        ("elsewhere", outside),
        ("passwd.md", Path("/etc/passwd")),
        ("secret.md", outside / "secret.md"),
    ]:
        skipped = f"corpus: skipped {corpus / link}: it is a link to {target}, outside the corpus folder"
        assert f"{skipped}; only links inside it are followed" in logged


def test_a_folder_link_inside_the_corpus_is_followed(served: tuple[AnvilServer, Path, Path]) -> None:
    server, _, _ = served
    assert sorted(search(server, "frobnicator")) == ["guide/widgets.md", "latest/widgets.md"]
    fetched = fetch(server, "latest/widgets.md")
    assert fetched.status_code == 200 and "frobnicator" in fetched.json()["text"]


def test_a_file_that_is_not_utf8_is_skipped_by_name_and_offset_and_the_rest_served(
    served: tuple[AnvilServer, Path, Path],
) -> None:
    server, corpus, _ = served
    assert (
        f"corpus: skipped {corpus / 'latin1.md'}: it is not UTF-8 text (byte 0xe9 at offset 15): save it as "
        "UTF-8 to have it read"
    ) in warnings(server)
    assert fetch(server, "latin1.md").status_code == 404
    assert fetch(server, "guide/widgets.md").status_code == 200


def test_a_file_that_cannot_be_read_is_skipped_by_name(served: tuple[AnvilServer, Path, Path]) -> None:
    server, corpus, _ = served
    assert f"corpus: skipped {corpus / 'locked.md'}: it cannot be read (Permission denied)" in warnings(
        server
    )
    assert search(server, "narwhals") == []


def test_a_corpus_with_documents_says_nothing_in_readyz(served: tuple[AnvilServer, Path, Path]) -> None:
    server, _, _ = served
    ready = httpx.get(f"{server.url}/readyz")
    assert ready.status_code == 200 and "warnings" not in ready.json()


# --- an empty corpus -------------------------------------------------------------------------


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
        assert ready.json() == {"status": "ok", "checks": {"store": "ok"}, "warnings": [EMPTY_CORPUS]}
        asked = httpx.post(
            f"{server.url}/api/ask", json={"question": "How do I start?"}, headers=headers(server)
        )
        assert asked.status_code == 200 and asked.json()["answer"] == NO_MATCH_ANSWER
        assert (
            f"corpus: {corpus} holds no *.md or *.mdx document with text, so every question will be answered "
            "that nothing was found: add documents there, or set ANVIL_CORPUS_DIR"
        ) in warnings(server)
