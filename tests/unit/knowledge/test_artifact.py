"""The index file: what is written is what opens, its version is its content, a damaged file is
refused with a reason, and a write replaces the old file whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from app.knowledge import artifact
from app.knowledge.artifact import IndexFile, InvalidIndex, write_index

ARRAYS = {
    "ids": np.array([3, 1, 4, 1, 5], dtype=np.int32),
    "weights": np.linspace(0.0, 1.0, 7),
    "text": np.frombuffer("héllo\0wörld\0".encode(), dtype=np.uint8),
    "empty": np.zeros(0, dtype=np.int64),
    "grid": np.arange(12, dtype=np.int64).reshape(3, 4),
}
CONTENT = {"passages": 5, "lexical": "x"}


def written(path: Path, built: str = "then", content: dict[str, object] = CONTENT) -> str:
    return write_index(path, ARRAYS, content, {"at": built})


def test_what_is_written_opens_as_it_was(tmp_path: Path) -> None:
    version = written(tmp_path / "i.anvilidx")
    opened = IndexFile(tmp_path / "i.anvilidx")
    assert (opened.version, opened.content, opened.built) == (version, CONTENT, {"at": "then"})
    assert opened.names() == set(ARRAYS)
    for name, array in ARRAYS.items():
        assert opened.array(name).dtype == array.dtype
        assert np.array_equal(opened.array(name), array)
    assert not opened.array("ids").flags.writeable
    opened.close()


def test_the_version_is_the_content_not_the_time_of_building(tmp_path: Path) -> None:
    first = written(tmp_path / "a", built="monday")
    assert written(tmp_path / "b", built="tuesday") == first
    assert written(tmp_path / "c", content={**CONTENT, "passages": 6}) != first


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-3]), "truncated or damaged"),
        (lambda p: flip(p, p.stat().st_size - 1), "does not match its version"),
        (lambda p: flip(p, 0), "is not a knowledge index"),
        (lambda p: p.write_bytes(b""), "is empty"),
        (lambda p: flip(p, 20), "damaged header"),
    ],
    ids=["truncated", "a changed byte", "another kind of file", "empty", "a damaged header"],
)
def test_a_damaged_index_is_refused_saying_why(tmp_path: Path, damage, said: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "i.anvilidx"
    written(path)
    damage(path)
    with pytest.raises(InvalidIndex, match=said):
        IndexFile(path)


def test_an_index_of_another_format_asks_for_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "i.anvilidx"
    monkeypatch.setattr(artifact, "FORMAT", 99)
    written(path)
    monkeypatch.undo()
    with pytest.raises(InvalidIndex, match="format 99; this Anvil serves format 1: rebuild it"):
        IndexFile(path)


def test_a_failed_write_leaves_the_old_index_and_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "i.anvilidx"
    old = written(path)

    def refused(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(OSError, match="No space"):
        written(path, content={**CONTENT, "passages": 9})
    monkeypatch.undo()
    assert IndexFile(path).version == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i.anvilidx"]


def test_an_open_index_keeps_serving_when_a_new_one_replaces_its_file(tmp_path: Path) -> None:
    path = tmp_path / "i.anvilidx"
    written(path)
    opened = IndexFile(path)
    ids = opened.array("ids")
    written(path, content={**CONTENT, "passages": 7})
    assert np.array_equal(ids, ARRAYS["ids"])
    assert IndexFile(path).content["passages"] == 7


def test_a_copy_keeps_serving_when_its_source_is_overwritten_in_place(tmp_path: Path) -> None:
    # Mapped as it is, a file cut short under its reader would kill it at its next look (SIGBUS).
    path, copies = tmp_path / "i.anvilidx", tmp_path / "copies"
    copies.mkdir()
    written(path)
    opened = IndexFile(path, copy_to=copies)
    path.write_bytes(b"overwritten")
    assert np.array_equal(opened.array("weights"), ARRAYS["weights"])
    assert np.array_equal(opened.array("grid"), ARRAYS["grid"])
    assert list(copies.iterdir()) == []  # the copy has no name another process could open
    opened.close()
