"""Which files a corpus folder gives: links followed only inside it, and files that cannot be read
skipped with a warning naming them, the rest read."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from app.adapters.engines.corpus import read_corpus
from app.adapters.engines.retrieval import NO_MATCH_ANSWER, RetrievalEngine

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links and FIFOs as POSIX has them")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "guide").mkdir(parents=True)
    (folder / "guide" / "install.md").write_text("# Install\nRun the installer.\n", encoding="utf-8")
    (folder / "index.md").write_text("# Index\nStart here.\n", encoding="utf-8")
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.md").write_text("# Secret\nThe launch code is 0000.\n", encoding="utf-8")
    return folder


def sources(folder: Path) -> list[str]:
    return [file.source for file in read_corpus(folder)]


def skipped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "skipped" in r.message]


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


def test_links_inside_the_folder_are_followed_files_and_folders_alike(corpus: Path) -> None:
    (corpus / "setup.md").symlink_to(Path("guide") / "install.md")
    (corpus / "latest").symlink_to("guide", target_is_directory=True)

    files = {file.source: file for file in read_corpus(corpus)}
    assert sorted(files) == ["guide/install.md", "index.md", "latest/install.md", "setup.md"]
    assert files["setup.md"].text == files["latest/install.md"].text == "# Install\nRun the installer.\n"


def test_a_corpus_folder_that_is_itself_a_link_is_read_through_it(corpus: Path, tmp_path: Path) -> None:
    (tmp_path / "current").symlink_to(corpus, target_is_directory=True)
    (corpus / "setup.md").symlink_to(corpus / "guide" / "install.md")  # absolute, inside the real folder

    assert sources(tmp_path / "current") == ["guide/install.md", "index.md", "setup.md"]


def test_a_link_back_to_a_folder_holding_it_is_skipped_not_walked_forever(
    corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (corpus / "guide" / "up").symlink_to("..", target_is_directory=True)
    (corpus / "self").symlink_to(".", target_is_directory=True)
    (corpus / "ping.md").symlink_to("pong.md")
    (corpus / "pong.md").symlink_to("ping.md")

    assert sources(corpus) == ["guide/install.md", "index.md"]
    messages = skipped(caplog)
    assert (
        f"corpus: skipped {corpus / 'guide' / 'up'}: it is a link to {corpus}, a folder that holds the link"
        in (messages)
    )
    assert any(m.startswith(f"corpus: skipped {corpus / 'self'}: it is a link to {corpus}") for m in messages)
    assert any(
        m.startswith(f"corpus: skipped {corpus / 'ping.md'}: it is a link that leads nowhere")
        for m in messages
    )


def test_a_broken_link_is_skipped_with_a_warning(corpus: Path, caplog: pytest.LogCaptureFixture) -> None:
    (corpus / "gone.md").symlink_to("removed.md")

    assert sources(corpus) == ["guide/install.md", "index.md"]
    assert skipped(caplog) == [
        f"corpus: skipped {corpus / 'gone.md'}: it is a link to {corpus / 'removed.md'}, which does not exist"
    ]


def test_a_file_that_is_not_utf8_is_skipped_naming_it_and_the_offset(
    corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (corpus / "guide" / "latin1.md").write_bytes(b"# Caf\xe9\nOpen late.\n")

    files = read_corpus(corpus)

    assert [file.source for file in files] == ["guide/install.md", "index.md"]
    assert skipped(caplog) == [
        f"corpus: skipped {corpus / 'guide' / 'latin1.md'}: it is not UTF-8 text (byte 0xe9 at offset 5): "
        "save it as UTF-8 to have it read"
    ]


def test_line_ends_are_read_as_text_mode_reads_them(corpus: Path) -> None:
    (corpus / "index.md").write_bytes(b"\xef\xbb\xbf# Index\r\nStart here.\rThen go on.\r\n")

    (index,) = [file for file in read_corpus(corpus) if file.source == "index.md"]

    assert index.text == "\ufeff# Index\nStart here.\nThen go on.\n"


def test_a_fifo_named_like_a_document_does_not_stop_the_reading(corpus: Path) -> None:
    os.mkfifo(corpus / "pipe.md")
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.extend(sources(corpus)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "reading the corpus blocked on a FIFO"
    assert found == ["guide/install.md", "index.md"]


@pytest.mark.skipif(os.geteuid() == 0, reason="file modes do not stop root")
def test_a_file_or_folder_that_cannot_be_read_is_skipped(
    corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (corpus / "index.md").chmod(0)
    (corpus / "guide").chmod(0)
    try:
        assert sources(corpus) == []
    finally:
        (corpus / "guide").chmod(0o700)
        (corpus / "index.md").chmod(0o600)
    assert skipped(caplog) == [
        f"corpus: skipped {corpus / 'guide'}: the folder cannot be read (Permission denied)",
        f"corpus: skipped {corpus / 'index.md'}: it cannot be read (Permission denied)",
    ]


# --- what the engine makes of it --------------------------------------------------------------


@pytest.mark.anyio
async def test_fetch_and_search_never_reach_a_file_outside_through_a_link(
    corpus: Path, outside: Path
) -> None:
    (corpus / "link.md").symlink_to(outside / "secret.md")
    (corpus / "more").symlink_to(outside, target_is_directory=True)
    engine = RetrievalEngine.build(corpus)

    assert await engine.fetch("link.md", 10_000) is None
    assert await engine.fetch("more/secret.md", 10_000) is None
    assert await engine.search("launch code", 10) == []
    assert (await engine.answer("What is the launch code?", [])).text == NO_MATCH_ANSWER


@pytest.mark.anyio
async def test_fetch_serves_what_was_read_at_start_up_whatever_the_folder_becomes(
    corpus: Path, outside: Path
) -> None:
    engine = RetrievalEngine.build(corpus)
    (corpus / "index.md").unlink()
    (corpus / "index.md").symlink_to(outside / "secret.md")

    fetched = await engine.fetch("index.md", 10_000)
    assert fetched is not None and fetched.text == "# Index\nStart here.\n"


def test_the_engine_counts_its_documents_and_warns_when_there_are_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "empty.md").write_text("---\ntitle: Nothing here\n---\n", encoding="utf-8")
    (tmp_path / "bad.md").write_bytes(b"\xff")

    assert RetrievalEngine.build(tmp_path).document_count == 0
    (warning,) = [r.getMessage() for r in caplog.records if "holds no" in r.message]
    assert warning == (
        f"corpus: {tmp_path} holds no *.md or *.mdx document with text, so every question will be "
        "answered that nothing was found: add documents there, or set ANVIL_CORPUS_DIR"
    )

    caplog.clear()
    (tmp_path / "bad.md").write_text("# Back\nNow readable.\n", encoding="utf-8")
    assert RetrievalEngine.build(tmp_path).document_count == 1
    assert not [r for r in caplog.records if "holds no" in r.message]
