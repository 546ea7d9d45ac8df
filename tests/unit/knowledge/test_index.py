"""An index written to a file and opened again answers exactly as the one built in memory; the
start-up cache opens an unchanged folder's index and rebuilds a changed one."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

import pytest
from support.retrieval import engine_of

from app.domain.ports import Passage
from app.engines.retrieval.engine import RetrievalEngine
from app.knowledge import corpus_cache as cache_module
from app.knowledge.build import Source, build, page_url, read_sources
from app.knowledge.corpus_cache import index_folder
from app.knowledge.index import PassageIndex

pytestmark = pytest.mark.anyio

DOCS = Path(__file__).resolve().parents[3] / "docs"
QUESTIONS = [
    "How long does a conversation live?",
    "How do I deploy to Azure?",
    "and how is it configured?",
    "What does the bridge do?",
    "motorcycle oil filters",
]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[RetrievalEngine, RetrievalEngine]:
    path = tmp_path_factory.mktemp("index") / "docs.anvilidx"
    build([Source(DOCS)], path)
    return engine_of(DOCS), RetrievalEngine(PassageIndex.open(path))


@pytest.mark.parametrize("question", QUESTIONS)
async def test_an_opened_index_answers_as_the_one_built_in_memory(
    both: tuple[RetrievalEngine, RetrievalEngine], question: str
) -> None:
    memory, opened = both
    assert (opened.passage_count, opened.document_count) == (memory.passage_count, memory.document_count)
    from_file, in_memory = await opened.answer(question, ()), await memory.answer(question, ())
    assert from_file.text == in_memory.text
    assert [unversioned(p) for p in from_file.sources] == list(in_memory.sources)
    found = await opened.search(question, 8)
    assert [unversioned(p) for p in found] == await memory.search(question, 8)
    assert {p.index_version for p in found} <= {opened.index.version}


def unversioned(passage: Passage) -> Passage:
    return dataclasses.replace(passage, index_version=None)


async def test_an_opened_index_fetches_files_as_the_one_built_in_memory(
    both: tuple[RetrievalEngine, RetrievalEngine],
) -> None:
    memory, opened = both
    for source in ("configuration.md", "deployment.md", "nothing.md"):
        assert await opened.fetch(source, 500) == await memory.fetch(source, 500)


def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.md").write_text("# Tides\n\nThe tide turns twice a day.\n")
    (folder / "b.md").write_text("# Winds\n\nTrade winds blow from the east.\n")
    return folder


def test_an_unchanged_folder_opens_its_cached_index_and_a_change_rebuilds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, cache = corpus(tmp_path), tmp_path / "cache"
    first = index_folder(folder, cache)
    (cached,) = cache.iterdir()
    writes: list[Path] = []
    real_write = cache_module.write_arrays
    monkeypatch.setattr(
        cache_module, "write_arrays", lambda *a, **k: writes.append(a[2]) or real_write(*a, **k)
    )

    again = index_folder(folder, cache)
    assert writes == [] and again.version == first.version and list(cache.iterdir()) == [cached]

    (folder / "b.md").write_text("# Winds\n\nMonsoon winds turn with the seasons.\n")
    changed = index_folder(folder, cache)
    assert len(writes) == 1 and changed.version != first.version
    assert list(cache.iterdir()) == [writes[0]] != [cached]  # the old one is gone
    assert oct(writes[0].stat().st_mode & 0o777) == "0o600"


def test_a_damaged_cache_is_built_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder, cache = corpus(tmp_path), tmp_path / "cache"
    version = index_folder(folder, cache).version
    (cached,) = cache.iterdir()
    cached.write_bytes(cached.read_bytes()[:100])
    with caplog.at_level(logging.WARNING):
        assert index_folder(folder, cache).version == version
    assert "cached index cannot be served" in caplog.text


def test_a_cache_that_cannot_be_written_is_warned_about_and_the_index_kept_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = corpus(tmp_path)
    (tmp_path / "file").write_text("")
    with caplog.at_level(logging.WARNING):
        index = index_folder(folder, tmp_path / "file" / "cache")
    assert index.document_count == 2
    assert (
        f"the index is built at every start because cannot keep the index in {tmp_path / 'file' / 'cache'}"
        in caplog.text
    )


def test_documents_of_several_folders_are_named_by_their_folder(tmp_path: Path) -> None:
    one, two = tmp_path / "guides", tmp_path / "reference"
    shutil.copytree(corpus(tmp_path), one)
    shutil.copytree(tmp_path / "corpus", two)
    assert [f.source for f in read_sources([Source(one), Source(two)])[0]] == [
        "guides/a.md",
        "guides/b.md",
        "reference/a.md",
        "reference/b.md",
    ]
    (tmp_path / "x").mkdir()
    shutil.copytree(one, tmp_path / "x" / "guides")
    with pytest.raises(ValueError, match=r"two source folders have the same name \(guides\)"):
        read_sources([Source(one), Source(tmp_path / "x" / "guides")])


def test_an_empty_corpus_makes_an_index_that_finds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.anvilidx"
    (tmp_path / "empty").mkdir()
    built = build([Source(tmp_path / "empty")], path)
    assert (built.files, built.passages) == (0, 0)
    index = PassageIndex.open(path)
    assert (index.passage_count, index.document_count) == (0, 0)


@pytest.mark.parametrize(
    ("path", "url"),
    [
        ("guide/install.md", "https://docs.example.com/v2/guide/install"),
        ("guide/index.mdx", "https://docs.example.com/v2/guide/"),
        ("index.md", "https://docs.example.com/v2/"),
        ("reference/api.rst", "https://docs.example.com/v2/reference/api.html"),
        ("legacy/page.html", "https://docs.example.com/v2/legacy/page.html"),
    ],
)
def test_a_document_is_published_at_its_path_under_its_site(path: str, url: str) -> None:
    assert page_url("https://docs.example.com/v2/", path) == url


async def test_cited_passages_link_to_their_page_and_heading_when_the_folder_names_its_site(
    tmp_path: Path,
) -> None:
    guides, notes = tmp_path / "guides", tmp_path / "notes"
    for folder in (guides, notes):
        folder.mkdir()
    (guides / "install.md").write_text(
        "# Installing\n\nRun the installer first.\n\n## Upgrading from v1.x\n\nRemove the old cache.\n"
    )
    (notes / "tides.md").write_text("# Tides\n\nThe tide turns twice a day.\n")
    target = tmp_path / "i.anvilidx"
    build([Source(guides, "https://docs.example.com"), Source(notes)], target)
    engine = RetrievalEngine(PassageIndex.open(target))
    (upgrade,) = await engine.search("remove the old cache when upgrading", 1)
    assert upgrade.url == "https://docs.example.com/install#upgrading-from-v1x"
    (tides,) = await engine.search("tide turns", 1)
    assert tides.source == "notes/tides.md" and tides.url is None
    answered = await engine.answer("How do I upgrade from v1?", ())
    assert answered.sources[0].url == "https://docs.example.com/install#upgrading-from-v1x"


async def test_a_front_matter_url_or_slug_names_its_page(tmp_path: Path) -> None:
    site, bare = tmp_path / "site", tmp_path / "bare"
    for folder in (site, bare):
        folder.mkdir()
    (site / "a.md").write_text("---\nslug: /start/here\n---\n# Start\n\nAlpha beacons glow.\n")
    (site / "b.md").write_text(
        "---\nurl: https://elsewhere.example/b.html\n---\n# B\n\nBravo lanterns hum.\n"
    )
    (bare / "c.md").write_text("---\nurl: https://pages.example/c\n---\n# C\n\nCharlie torches flicker.\n")
    (bare / "d.md").write_text("---\nslug: d\n---\n# D\n\nDelta candles drip.\n")
    target = tmp_path / "i.anvilidx"
    build([Source(site, "https://docs.example.com"), Source(bare)], target)
    engine = RetrievalEngine(PassageIndex.open(target))
    found = {
        p.source: p.url
        for text in ("alpha beacons", "bravo lanterns", "charlie torches", "delta candles")
        for p in await engine.search(text, 1)
    }
    assert found == {
        "site/a.md": "https://docs.example.com/start/here",
        "site/b.md": "https://elsewhere.example/b.html",
        "bare/c.md": "https://pages.example/c",
        "bare/d.md": None,  # a slug needs a site to be under
    }


def test_a_changed_front_matter_url_gives_the_cache_another_key(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("---\nurl: https://one.example/a\n---\n# A\n\nText.\n")
    first = index_folder(folder, tmp_path / "cache")
    (folder / "a.md").write_text("---\nurl: https://two.example/a\n---\n# A\n\nText.\n")
    second = index_folder(folder, tmp_path / "cache")
    assert first.version != second.version and second.url(0) == "https://two.example/a"
