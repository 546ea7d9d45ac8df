"""Where `anvil index` writes is checked before any source is read: a folder that takes a new file
(tried for real, and left as it was), or the nearest folder above one still to be made."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.knowledge.build import Source
from app.knowledge.index_target import UnwritableTarget, check_target


def docs(tmp_path: Path) -> list[Source]:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "page.md").write_text("# Page\n\nThe tide turns twice a day.\n")
    return [Source(folder)]


def test_a_writable_folder_passes_and_is_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    check_target(out / "docs.anvilidx", docs(tmp_path))
    assert list(out.iterdir()) == []


def test_a_folder_still_to_be_made_is_checked_where_it_would_be_made(tmp_path: Path) -> None:
    check_target(tmp_path / "build" / "indexes" / "docs.anvilidx", docs(tmp_path))
    assert not (tmp_path / "build").exists()


def test_a_file_where_the_folder_would_be_is_refused_saying_so(tmp_path: Path) -> None:
    (tmp_path / "build").write_text("not a folder")
    with pytest.raises(UnwritableTarget, match=r"build is a file, not a folder: give another --output"):
        check_target(tmp_path / "build" / "docs.anvilidx", docs(tmp_path))
