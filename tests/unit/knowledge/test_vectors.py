"""Passage vectors in the index: kept by content hash across rebuilds, and served only with the
embedder that made them."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from support.corpus_files import bays_corpus
from support.embedders import Counting, Failing

from app.errors import EngineFailed
from app.knowledge.artifact import InvalidIndex
from app.knowledge.build import Source, build
from app.knowledge.corpus_cache import index_folder, open_cached
from app.knowledge.index import PassageIndex
from app.knowledge.served import ServedIndex
from app.knowledge.vectors import EmbedderMismatch


def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.md").write_text(
        "# Tides\n\nThe tide turns twice a day.\n\n## Springs\n\nSpring tides are high.\n"
    )
    (folder / "b.md").write_text("# Winds\n\nTrade winds blow from the east.\n")
    return folder


def test_a_rebuild_embeds_only_the_passages_whose_text_changed(tmp_path: Path) -> None:
    folder, target = corpus(tmp_path), tmp_path / "docs.anvilidx"
    embedder = Counting()
    first = build([Source(folder)], target, embedder=embedder)
    assert first.embedded == first.passages == 3 and len(embedder.passages) == 3

    (folder / "b.md").write_text("# Winds\n\nMonsoon winds turn with the seasons.\n")
    embedder.passages.clear()
    second = build([Source(folder)], target, embedder=embedder)
    assert second.embedded == 1 and embedder.passages == ["Winds\n\nMonsoon winds turn with the seasons."]
    index = PassageIndex.open(target)
    assert index.embedder == "test:counting" and index.vectors is not None and index.vectors.shape == (3, 8)
    # Each kept vector is the one the embedder gives that passage's text.
    assert np.allclose(index.vectors, embedder.embed(index.passage_texts(), query=False))
    index.close()


def test_vectors_of_another_embedder_are_never_reused(tmp_path: Path) -> None:
    folder, target = corpus(tmp_path), tmp_path / "docs.anvilidx"
    build([Source(folder)], target, embedder=Counting("test:one"))
    other = Counting("test:two")
    assert build([Source(folder)], target, embedder=other).embedded == 3


def test_an_index_is_served_only_with_the_embedder_it_was_built_with(tmp_path: Path) -> None:
    folder = corpus(tmp_path)
    build([Source(folder)], tmp_path / "vectors.anvilidx", embedder=Counting("test:one"))
    build([Source(folder)], tmp_path / "words.anvilidx")
    with_vectors = PassageIndex.open(tmp_path / "vectors.anvilidx")
    words_only = PassageIndex.open(tmp_path / "words.anvilidx")
    with pytest.raises(EmbedderMismatch, match="embedded by test:one and this server embeds with test:two"):
        with_vectors.check_embedder("test:two")
    with pytest.raises(
        EmbedderMismatch, match="built without embeddings and this server embeds with test:one"
    ):
        words_only.check_embedder("test:one")
    with_vectors.check_embedder("test:one")
    with_vectors.check_embedder(None)  # by words alone, any index serves
    words_only.check_embedder(None)
    # A swap to an index of another embedder is refused; the served one stays.
    serving = ServedIndex(with_vectors, "test:one")
    with pytest.raises(InvalidIndex):
        serving.swap(words_only)
    assert serving.index is with_vectors


def test_a_first_start_serves_words_at_once_and_keeps_the_vectors_once_embedded(tmp_path: Path) -> None:
    folder, cache = corpus(tmp_path), tmp_path / "cache"
    embedder = Counting()
    index, pending = open_cached(folder, cache, embedder=embedder)
    assert index.vectors is None and pending is not None and pending.missing == 3
    assert list(cache.glob("*.anvilidx")) == []
    embedded = pending.run()
    assert embedded.vectors is not None and embedded.embedder == "test:counting"
    # The next start opens it, with nothing to embed.
    again, none = open_cached(folder, cache, embedder=embedder)
    assert none is None and again.version == embedded.version and len(embedder.passages) == 3
    # A changed file: the kept vectors of the others are reused.
    (folder / "a.md").write_text(
        "# Tides\n\nThe tide turns twice a day.\n\n## Neaps\n\nNeap tides are low.\n"
    )
    _, pending = open_cached(folder, cache, embedder=embedder)
    assert pending is not None and pending.missing == 1


def test_embedding_in_the_background_stops_between_batches_when_cancelled(tmp_path: Path) -> None:
    from app.knowledge.corpus_cache import EmbeddingCancelled

    _, pending = open_cached(corpus(tmp_path), tmp_path / "cache", embedder=Counting())
    assert pending is not None
    pending.cancel()
    with pytest.raises(EmbeddingCancelled):
        pending.run()
    assert list((tmp_path / "cache").glob("*.anvilidx")) == []


def test_an_embedding_stopped_half_way_resumes_where_it_stopped(tmp_path: Path) -> None:
    from app.knowledge.corpus_cache import EmbeddingCancelled
    from app.knowledge.resume import partial_path

    folder, cache = bays_corpus(tmp_path), tmp_path / "cache"
    first = Counting()
    _, pending = open_cached(folder, cache, embedder=first)
    assert pending is not None and pending.missing == 10

    def stop_after_two_batches(done: int, of: int) -> None:
        if done >= 4:
            pending.cancel()

    with pytest.raises(EmbeddingCancelled):
        pending.run(stop_after_two_batches)
    assert len(first.passages) == 6  # the batch under way when it was cancelled is kept too
    (kept,) = cache.glob("*.partial")
    assert list(cache.glob("*.anvilidx")) == []

    # The next start embeds only the passages the first had not.
    again = Counting()
    _, resumed = open_cached(folder, cache, embedder=again)
    assert resumed is not None and resumed.missing == 4
    index = resumed.run()
    assert len(again.passages) == 4 and not set(again.passages) & set(first.passages)
    assert not kept.exists() and partial_path(cache / "x.anvilidx") == cache / "x.partial"
    # And what it serves is what one run from the start would have made.
    assert index.vectors is not None
    assert np.allclose(index.vectors, Counting().embed(index.passage_texts(), query=False))
    index.close()


class Held(Counting):
    """Embeds `batches` batches, then holds the next until `release` is set."""

    def __init__(self, batches: int) -> None:
        super().__init__()
        self.batches = batches
        self.holding, self.release = threading.Event(), threading.Event()

    def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        if not query:
            if self.batches == 0:
                self.holding.set()
                assert self.release.wait(10)
            self.batches -= 1
        return super().embed(texts, query=query)


def test_a_cancelled_embedding_keeps_what_it_did_before_its_batch_under_way_ends(tmp_path: Path) -> None:
    from app.knowledge.corpus_cache import EmbeddingCancelled
    from app.knowledge.vectors import read_vectors

    folder, cache = bays_corpus(tmp_path), tmp_path / "cache"
    embedder = Held(batches=2)
    _, pending = open_cached(folder, cache, embedder=embedder)
    assert pending is not None
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            pending.run()
        except BaseException as error:
            outcome.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert embedder.holding.wait(10)
        pending.cancel()  # as a server shutting down does, with a batch under way
        (kept,) = cache.glob("*.partial")
        assert len(read_vectors(kept)) == 4
    finally:
        embedder.release.set()
        worker.join(10)
    assert [type(error) for error in outcome] == [EmbeddingCancelled]
    # The batch that was under way is kept too, once it ends.
    assert len(read_vectors(kept)) == 6


def test_an_embedder_failing_half_way_keeps_what_it_embedded(tmp_path: Path) -> None:
    folder, cache = bays_corpus(tmp_path), tmp_path / "cache"
    _, pending = open_cached(folder, cache, embedder=Failing(batches=3))
    assert pending is not None
    with pytest.raises(EngineFailed):
        pending.run()
    _, resumed = open_cached(folder, cache, embedder=Counting())
    assert resumed is not None and resumed.missing == 10 - 6


def test_an_index_build_whose_embedder_fails_half_way_is_resumed_by_the_next(tmp_path: Path) -> None:
    folder, target = bays_corpus(tmp_path), tmp_path / "out" / "docs.anvilidx"
    with pytest.raises(EngineFailed):
        build([Source(folder)], target, embedder=Failing(batches=2))
    assert not target.exists() and (tmp_path / "out" / "docs.partial").is_file()
    again = Counting()
    built = build([Source(folder)], target, embedder=again)
    assert built.embedded == len(again.passages) == 10 - 4
    assert sorted(p.name for p in target.parent.iterdir()) == ["docs.anvilidx"]


def test_a_long_embedding_keeps_its_vectors_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kept at every batch here: a process killed outright (no cancel) loses at most the interval.
    monkeypatch.setattr("app.knowledge.resume.INTERVAL", 0.0)
    monkeypatch.setattr("app.knowledge.resume.SPACING", 0)
    folder, cache = bays_corpus(tmp_path), tmp_path / "cache"
    _, pending = open_cached(folder, cache, embedder=Counting())
    assert pending is not None
    seen: list[int] = []

    def look(done: int, of: int) -> None:
        if done and len(seen) < 2:
            _, other = open_cached(folder, cache, embedder=Counting())
            assert other is not None
            seen.append(other.missing)

    pending.run(look)
    assert seen == [8, 6]
    assert [p.suffix for p in cache.iterdir()] == [".anvilidx"]


def test_without_an_embedder_the_cached_index_has_no_vectors(tmp_path: Path) -> None:
    index = index_folder(corpus(tmp_path), tmp_path / "cache")
    assert index.vectors is None and index.embedder is None and index.calibration is None


@pytest.mark.anyio
async def test_a_new_version_from_another_embedder_is_refused_by_the_refresher(tmp_path: Path) -> None:
    from app.knowledge.refresh import FileSource, IndexRefresher

    folder, target = corpus(tmp_path), tmp_path / "served.anvilidx"
    build([Source(folder)], target, embedder=Counting("test:one"))
    source = FileSource(target, tmp_path)
    served, seen = source.open()
    serving = ServedIndex(served, "test:one")
    refused: list[str] = []
    refresher = IndexRefresher(source, serving.index, seen, serving.swap, refused.append)

    build([Source(folder)], target, embedder=Counting("test:two"))
    assert await refresher.check() is False
    assert serving.index is served and len(refused) == 1
    assert "passages were embedded by test:two and this server embeds with test:one" in refused[0]
    assert await refresher.check() is False and len(refused) == 1  # said once


def test_keeping_the_vectors_so_far_never_takes_more_than_a_share_of_the_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.knowledge.resume import Checkpoint, partial_path

    monkeypatch.setattr("app.knowledge.resume.INTERVAL", 0.0)
    monkeypatch.setattr("app.knowledge.resume.SPACING", 10**9)  # as if keeping were very slow
    checkpoint = Checkpoint(tmp_path / "docs.anvilidx", "test:counting", [b"k" * 16], {})
    checkpoint.new[b"k" * 16] = np.ones(8, dtype=np.float32)
    checkpoint.tick()
    kept = partial_path(tmp_path / "docs.anvilidx")
    assert kept.is_file()
    kept.unlink()
    checkpoint.tick()  # far sooner than a billion times what the first keep took
    assert not kept.exists()
    checkpoint.keep()  # stopping keeps whatever the spacing
    assert kept.is_file()


def test_an_index_kept_by_other_reading_code_is_built_again_its_vectors_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.knowledge import corpus_cache

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Tides\n\nThe tide turns twice a day.\n", encoding="utf-8")
    first = corpus_cache.index_folder(corpus, tmp_path / "cache", embedder=Counting())
    first.close()
    kept = {path.name for path in (tmp_path / "cache").glob("*.anvilidx")}
    # A checkout whose readers changed, at the same version: the kept index is not its own.
    monkeypatch.setattr(corpus_cache, "reading_code", lambda: b"other readers")
    embedder = Counting()
    index, pending = corpus_cache.open_cached(corpus, tmp_path / "cache", embedder=embedder)
    assert pending is None and index.vectors is not None and embedder.passages == []
    rebuilt = {path.name for path in (tmp_path / "cache").glob("*.anvilidx")}
    assert len(rebuilt) == 1 and rebuilt != kept  # built again, under its own name, the old one gone
    index.close()
