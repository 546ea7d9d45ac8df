"""Which files a corpus folder gives: links inside it followed (files, folders, the folder itself
through a link), loops and broken links skipped with a warning, text read as text mode reads it,
and a FIFO never waited on. Links out of the folder and files that cannot be read are pinned in
tests/regressions/."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest
from support.corpus_files import make_corpus, skipped, sources

from app.knowledge.corpus_files import read_corpus

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links and FIFOs as POSIX has them")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return make_corpus(tmp_path)


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


def test_line_ends_are_read_as_text_mode_reads_them(corpus: Path) -> None:
    (corpus / "index.md").write_bytes(b"\xef\xbb\xbf# Index\r\nStart here.\rThen go on.\r\n")

    (index,) = [file for file in read_corpus(corpus) if file.source == "index.md"]

    assert index.text == "\ufeff# Index\nStart here.\nThen go on.\n"


def test_a_fifo_named_like_a_document_does_not_stop_the_reading(
    corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    os.mkfifo(corpus / "pipe.md")
    (corpus / "linked.md").symlink_to("pipe.md")
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.extend(sources(corpus)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "reading the corpus blocked on a FIFO"
    assert found == ["guide/install.md", "index.md"]
    assert skipped(caplog) == [
        f"corpus: skipped {corpus / name}: it is a FIFO (named pipe), not a file; only files are read"
        for name in ("linked.md", "pipe.md")
    ]


def test_a_socket_or_device_named_like_a_document_is_skipped_without_being_opened(
    corpus: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds = {"s.md": "a socket"}
    try:  # the null device, where root may make one
        os.mknod(corpus / "null.md", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        kinds["null.md"] = "a character device"
    except PermissionError:
        pass
    opened: list[str] = []
    real_open = os.open

    def recorded(path: str, *args: int, **kwargs: int) -> int:
        opened.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(corpus / "s.md"))
        monkeypatch.setattr(os, "open", recorded)
        assert sources(corpus) == ["guide/install.md", "index.md"]
    assert not [path for path in opened if path.endswith(tuple(kinds))]
    assert skipped(caplog) == [
        f"corpus: skipped {corpus / name}: it is {what}, not a file; only files are read"
        for name, what in sorted(kinds.items())
    ]
