"""One corpus `.md` file holding a `\\xff` byte (or one Anvil could not read) stopped start-up with
a codec (or permission) error that named no file. Fixed in 0.4.2: such a file is skipped with a
warning naming it (and the byte offset), and the rest of the corpus is served."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.anvil_server import AnvilServer
from support.corpus_files import fetch, search, skipped, sources, warnings

from app.knowledge.corpus_files import read_corpus

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes as POSIX has them")


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
