"""A symbolic link in the corpus folder to a file outside it (`ln -s /etc/passwd corpus/link.md`)
was served by `fetch` and found by `search`. Fixed in 0.4.2: links out of the corpus folder are
skipped with a warning naming them; links inside it are followed, folders included."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.anvil_server import AnvilServer
from support.corpus_files import fetch, search, skipped, sources, warnings
from support.retrieval import engine_of

from app.engines.retrieval.engine import NO_MATCH_ANSWER

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links as POSIX has them")


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


# --- reading the folder, and what the engine makes of it ------------------------------------


def test_a_file_link_out_of_the_folder_is_skipped_naming_the_link_and_its_target(
    corpus: Path, outside: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (corpus / "link.md").symlink_to(outside / "secret.md")
    (corpus / "passwd.md").symlink_to("/etc/passwd")

    assert sources(corpus) == ["guide/install.md", "index.md"]
    assert skipped(caplog) == [
        f"corpus: skipped {corpus / 'link.md'}: it is a link to {outside / 'secret.md'}, outside the "
        "corpus folder; only links inside it are followed",
        f"corpus: skipped {corpus / 'passwd.md'}: it is a link to /etc/passwd, outside the corpus "
        "folder; only links inside it are followed",
    ]


def test_a_folder_link_out_of_the_folder_is_skipped(
    corpus: Path, outside: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (corpus / "more").symlink_to(outside, target_is_directory=True)

    assert sources(corpus) == ["guide/install.md", "index.md"]
    (message,) = skipped(caplog)
    assert message.startswith(f"corpus: skipped {corpus / 'more'}: it is a link to {outside}, outside")


def test_a_link_that_leaves_through_another_link_is_skipped(corpus: Path, outside: Path) -> None:
    (corpus / "hop.md").symlink_to(outside / "secret.md")
    (corpus / "guide" / "via.md").symlink_to(Path("..") / "hop.md")

    assert sources(corpus) == ["guide/install.md", "index.md"]


@pytest.mark.anyio
async def test_fetch_and_search_never_reach_a_file_outside_through_a_link(
    corpus: Path, outside: Path
) -> None:
    (corpus / "link.md").symlink_to(outside / "secret.md")
    (corpus / "more").symlink_to(outside, target_is_directory=True)
    engine = engine_of(corpus)

    assert await engine.fetch("link.md", 10_000) is None
    assert await engine.fetch("more/secret.md", 10_000) is None
    assert await engine.search("launch code", 10) == []
    assert (await engine.answer("What is the launch code?", [])).text == NO_MATCH_ANSWER


@pytest.mark.anyio
async def test_fetch_serves_what_was_read_at_start_up_whatever_the_folder_becomes(
    corpus: Path, outside: Path
) -> None:
    engine = engine_of(corpus)
    (corpus / "index.md").unlink()
    (corpus / "index.md").symlink_to(outside / "secret.md")

    fetched = await engine.fetch("index.md", 10_000)
    assert fetched is not None and fetched.text == "# Index\nStart here.\n"
