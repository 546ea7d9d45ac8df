"""The embedded engine over a folder or over bare passages, as the tests and benchmarks make it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from app.domain.ports import Embedder
from app.engines.retrieval.engine import RetrievalEngine
from app.knowledge.corpus import CorpusPassage
from app.knowledge.corpus_cache import index_folder
from app.knowledge.index import PassageIndex


def engine_of(
    folder: Path, cache: Path | None = None, site: str | None = None, embedder: Embedder | None = None
) -> RetrievalEngine:
    """The engine of every document under `folder` (kept in `cache`, if given), its passages
    embedded by `embedder` before it returns."""
    return RetrievalEngine(index_folder(folder, cache, site, embedder), embedder)


def engine_of_passages(passages: Iterable[CorpusPassage]) -> RetrievalEngine:
    """The engine of bare passages (no files behind them: `fetch` finds nothing)."""
    return RetrievalEngine(PassageIndex.from_passages(passages))
