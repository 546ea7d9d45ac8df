"""`IndexRefresher`: each new index file is opened, checked and swapped to; a damaged one is
refused once and the old index keeps serving; a rebuild of the same documents swaps nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engines.retrieval.engine import RetrievalEngine
from app.knowledge.build import Source, build
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
