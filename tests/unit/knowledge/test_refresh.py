"""`IndexRefresher`: each new index file is opened, checked and swapped to; a damaged one is
refused once and the old index keeps serving; a rebuild of the same documents swaps nothing; one
that cannot be fetched is tried again with a growing wait, and an opening that does not return is
given up at its deadline."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from app.blob_urls import BlobStorageError
from app.engines.retrieval.engine import RetrievalEngine
from app.knowledge.build import Source, build
from app.knowledge.index import PassageIndex
from app.knowledge.refresh import FileSource, IndexRefresher
from app.knowledge.served import ServedIndex

pytestmark = pytest.mark.anyio


def folder(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "page.md").write_text(f"# Page\n\n{text}\n")
    return path


async def test_new_versions_are_swapped_in_and_damaged_ones_refused_once(tmp_path: Path) -> None:
    target = tmp_path / "served.anvilidx"
    build([Source(folder(tmp_path, "v1", "Tides turn twice a day."))], target)
    source = FileSource(target, tmp_path)
    served, seen = source.open()
    serving = ServedIndex(served)
    # The engine answers from whatever is served now.
    engine = RetrievalEngine(serving)
    refused: list[str] = []
    refresher = IndexRefresher(source, serving.index, seen, serving.swap, refused.append)
    first = engine.index.version

    assert await refresher.check() is False  # nothing new
    build([Source(folder(tmp_path, "same", "Tides turn twice a day."))], target)
    assert await refresher.check() is False and engine.index.version == first  # same documents

    build([Source(folder(tmp_path, "v2", "Monsoon winds turn with the seasons."))], target)
    assert await refresher.check() is True
    second = engine.index.version
    assert second != first and refresher.version == second
    assert "Monsoon" in (await engine.answer("When do monsoon winds turn?", ())).text

    target.write_bytes(target.read_bytes()[:-5])
    assert await refresher.check() is False and await refresher.check() is False
    assert len(refused) == 1 and "truncated or damaged" in refused[0]
    assert engine.index.version == second
    assert "Monsoon" in (await engine.answer("When do monsoon winds turn?", ())).text

    target.unlink()
    assert await refresher.check() is False and engine.index.version == second


class Scripted:
    """A source whose look says `version`, and whose opening fails with each of `failures` in
    turn (a `threading.Event` blocks until it is set) or else opens the index at `path`."""

    name = "https://account.blob.core.windows.net/indexes/docs.anvilidx"

    def __init__(self, path: Path, failures: list[BaseException | threading.Event]) -> None:
        self.path = path
        self.version = '"0x1"'
        self.failures = failures
        self.opened = 0

    def look(self) -> str:
        return self.version

    def open(self) -> tuple[PassageIndex, str]:
        self.opened += 1
        seen = self.version
        if self.failures:
            failure = self.failures.pop(0)
            if isinstance(failure, threading.Event):
                failure.wait()
            else:
                raise failure
        return PassageIndex.open(self.path), seen


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def two_versions(tmp_path: Path) -> tuple[PassageIndex, Path]:
    """The index served, and where the next version is."""
    build([Source(folder(tmp_path, "v1", "Tides turn twice a day."))], tmp_path / "v1.anvilidx")
    build([Source(folder(tmp_path, "v2", "Monsoon winds turn with the seasons."))], tmp_path / "v2.anvilidx")
    return PassageIndex.open(tmp_path / "v1.anvilidx"), tmp_path / "v2.anvilidx"


async def test_a_download_cut_short_is_tried_again_later_and_later_until_it_opens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = two_versions(tmp_path)
    cut = BlobStorageError("cannot reach http://127.0.0.1:1 (Connection reset by peer)")
    source = Scripted(new, [cut, cut, cut])
    serving = ServedIndex(old)
    clock = Clock()
    refused: list[str] = []
    refresher = IndexRefresher(source, old, '"0x0"', serving.swap, refused.append, clock=clock)

    waits = []
    while not await refresher.check():
        assert refresher.behind_since == 1000.0 and source.opened <= 4
        before = source.opened
        assert await refresher.check() is False and source.opened == before  # not before its time
        waits.append(refresher._retry_at - clock.now)
        clock.now = refresher._retry_at
    assert waits == [1.0, 2.0, 4.0] and source.opened == 4 and refused == []
    assert serving.index.version == PassageIndex.open(new).version and refresher.behind_since is None
    assert (
        caplog.messages.count(
            f"index: cannot fetch the new version of {source.name} ({cut}); still serving version "
            f"{old.version}, trying again in 1 s"
        )
        == 1
    )


async def test_a_version_that_changes_again_is_tried_at_once_and_the_wait_starts_over(tmp_path: Path) -> None:
    old, new = two_versions(tmp_path)
    source = Scripted(new, [OSError("cut"), OSError("cut")])
    serving = ServedIndex(old)
    clock = Clock()
    refresher = IndexRefresher(source, old, '"0x0"', serving.swap, lambda _: None, clock=clock)
    assert await refresher.check() is False and await refresher.check() is False
    assert source.opened == 1
    source.version, clock.now = '"0x2"', 1000.5
    assert await refresher.check() is False and source.opened == 2
    assert refresher.behind_since == 1000.5 and refresher._retry_at == 1001.5
    clock.now = 1001.5
    assert await refresher.check() is True and refresher.behind_since is None


async def test_an_opening_that_does_not_return_is_given_up_at_its_deadline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = two_versions(tmp_path)
    hung = threading.Event()
    source = Scripted(new, [hung])
    serving = ServedIndex(old)
    clock = Clock()
    refresher = IndexRefresher(source, old, '"0x0"', serving.swap, lambda _: None, deadline=0.2, clock=clock)
    assert await refresher.check() is False
    assert "(no answer within 0.2 s (ANVIL_INDEX_TIMEOUT_SECONDS))" in caplog.text
    assert refresher.behind_since == 1000.0 and serving.index is old
    hung.set()  # what the abandoned call opens at last is closed, never served
    clock.now = refresher._retry_at
    assert await refresher.check() is True and serving.index.version == PassageIndex.open(new).version


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs as POSIX has them")
async def test_a_fifo_put_where_the_index_was_is_refused_at_once_and_a_later_file_served(
    tmp_path: Path,
) -> None:
    target = tmp_path / "served.anvilidx"
    build([Source(folder(tmp_path, "v1", "Tides turn twice a day."))], target)
    source = FileSource(target, tmp_path)
    served, seen = source.open()
    serving = ServedIndex(served)
    refused: list[str] = []
    refresher = IndexRefresher(source, serving.index, seen, serving.swap, refused.append, deadline=30)
    target.unlink()
    os.mkfifo(target)
    assert await refresher.check() is False and await refresher.check() is False
    assert refused == [
        f"{target} is a FIFO (named pipe), not a file: give the path of an index file `anvil index` wrote"
    ]
    target.unlink()
    build([Source(folder(tmp_path, "v2", "Monsoon winds turn with the seasons."))], target)
    assert await refresher.check() is True
