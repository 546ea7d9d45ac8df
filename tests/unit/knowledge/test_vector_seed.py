"""A folder's vector seed (`.anvil-vectors`): a first start over the folder and `anvil index` reuse
it for every passage whose text is unchanged, so a fresh clone ranks by meaning within seconds;
docs/ carries one for the bundled docs."""

from __future__ import annotations

from pathlib import Path

from support.embedders import Counting

from app.knowledge.build import Source, build
from app.knowledge.corpus_cache import index_folder, open_cached
from app.knowledge.vectors import SEED, reusable, seed_vectors, vector_key, write_vectors

DOCS = Path(__file__).resolve().parents[3] / "docs"


def seeded(tmp_path: Path) -> Path:
    """A corpus of two pages whose seed holds the vectors of all their passages but one changed."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.md").write_text("# Tides\n\nThe tide turns twice a day.\n", encoding="utf-8")
    (folder / "b.md").write_text("# Winds\n\nTrade winds blow from the east.\n", encoding="utf-8")
    index = index_folder(folder, embedder=Counting())
    write_vectors(
        folder / SEED, "test:counting", reusable(index.embedder, index.vectors, index.vector_keys), mode=0o644
    )
    (folder / "b.md").write_text("# Winds\n\nTrade winds blow from the west.\n", encoding="utf-8")
    return folder


def test_a_first_start_embeds_only_what_the_seed_lacks(tmp_path: Path) -> None:
    folder, embedder = seeded(tmp_path), Counting()
    _, pending = open_cached(folder, tmp_path / "cache", embedder=embedder)
    assert pending is not None and pending.missing == 1
    done = pending.run()
    assert len(embedder.passages) == 1 and "from the west" in embedder.passages[0]
    assert done.vectors is not None and done.passage_count == 2
    assert not any(source == SEED for source in done.documents)  # the seed is no document


def test_anvil_index_reuses_a_source_folders_seed(tmp_path: Path) -> None:
    folder, embedder = seeded(tmp_path), Counting()
    built = build([Source(folder)], tmp_path / "out.anvilidx", embedder=embedder)
    assert built.embedded == 1 and len(embedder.passages) == 1


def test_a_seed_of_another_embedder_or_a_damaged_one_is_not_used(tmp_path: Path) -> None:
    folder, embedder = seeded(tmp_path), Counting("test:other")
    _, pending = open_cached(folder, tmp_path / "cache", embedder=embedder)
    assert pending is not None and pending.missing == 2
    (folder / SEED).write_bytes(b"not an index")
    assert seed_vectors(folder) == {}


def test_the_bundled_docs_seed_holds_most_of_their_passages() -> None:
    seed = seed_vectors(DOCS)
    index = index_folder(DOCS)
    keys = {vector_key("local:multilingual-e5-small-q4", text) for text in index.passage_texts()}
    covered = len(keys & set(seed)) / len(keys)
    # Below this, a fresh clone embeds for more than a minute at its first start again: refresh the seed
    # with `.venv/bin/python bench/docs_vectors.py` and commit docs/.anvil-vectors.
    assert covered >= 0.75, f"docs/{SEED} holds {covered:.0%} of the docs' passages"
