"""Site styles: pages and heading anchors as each generator makes them, from their documented
examples (github-slugger's and Docusaurus' READMEs, VitePress' and Python-Markdown's docs)."""

from __future__ import annotations

import typing
from pathlib import Path

import numpy as np
import pytest

from app.cli.main import main
from app.knowledge.artifact import InvalidIndex
from app.knowledge.build import Source, page_url, read_sources
from app.knowledge.corpus import CorpusFile, file_passages
from app.knowledge.index import PassageIndex
from app.knowledge.index_checks import check_index
from app.knowledge.readers.documents import read_document
from app.knowledge.sections import LEXICAL, build_arrays
from app.knowledge.sites import STYLES, sniff, style_named
from app.settings.engines import EngineSettings, SiteStyleName

SITE = "https://docs.example.com"


def anchors(style: str, *headings: str | tuple[str, str]) -> list[str | None]:
    pairs = [(h, None) if isinstance(h, str) else h for h in headings]
    return STYLES[style].anchors(pairs)


def test_github_slugs_drop_punctuation_keep_letters_and_never_collapse_hyphens() -> None:
    assert anchors(
        "github", "Hello World", "Foo & Bar", "snake_case name", "Привет non-latin", "😄 unicode"
    ) == [
        "hello-world",
        "foo--bar",
        "snake_case-name",
        "привет-non-latin",
        "-unicode",
    ]


def test_github_repeats_get_counted_suffixes_as_github_slugger_does() -> None:
    assert anchors("github", "foo", "foo", "foo", "foo-1") == ["foo", "foo-1", "foo-2", "foo-1-1"]


def test_docusaurus_takes_an_explicit_id_first_and_slugs_as_github() -> None:
    assert anchors("docusaurus", ("Hello", "custom-id"), "Hello", "Hello") == [
        "custom-id",
        "hello",
        "hello-1",
    ]


def test_vitepress_slugs_as_its_slugify() -> None:
    assert anchors("vitepress", "Using Custom Anchors", "Café & bar", "1. Intro", "Usage", "Usage") == [
        "using-custom-anchors",
        "cafe-bar",
        "_1-intro",
        "usage",
        "usage-1",
    ]


def test_mkdocs_collapses_separators_and_counts_repeats_after_explicit_ids() -> None:
    assert anchors("mkdocs", "Log format & levels", ("Usage", "usage"), "Usage", "Usage", "数据") == [
        "log-format-levels",
        "usage",
        "usage_1",
        "usage_2",
        "_1",
    ]


def test_sphinx_slugs_as_docutils_and_counts_repeats_as_ids() -> None:
    assert anchors("sphinx", "raw_enabled", "Café options", "Usage", "Usage") == [
        "raw-enabled",
        "cafe-options",
        "usage",
        "id1",
    ]


def test_html_cites_an_element_id_or_the_nearest_heading_above_with_one() -> None:
    page = (
        "<title>Manual</title><h1>Manual</h1><p>x</p><h2><a name='Thread-Safety'></a>2.7 Thread-Safety</h2>"
        "<p>y</p><section id='limits'><h2>Limits</h2><p>z</p><h3>No id</h3><p>w</p></section>"
    )
    file = read_document(page, "Thread-Safety.html")
    passages = file_passages(file, anchors=STYLES["html"].anchors)
    assert [(p.heading, p.anchor) for p in passages] == [
        ("Manual", ""),
        ("Manual > 2.7 Thread-Safety", "Thread-Safety"),
        ("Manual > Limits", "limits"),
        ("Manual > Limits > No id", "limits"),
    ]
    assert "{#" not in file_passages(file)[1].heading


@pytest.mark.parametrize(
    ("style", "path", "page"),
    [
        ("sphinx", "guide/index.rst", "guide/index.html"),
        ("sphinx", "config.rst", "config.html"),
        ("sphinx-dirhtml", "guide/index.rst", "guide/"),
        ("sphinx-dirhtml", "config.rst", "config/"),
        ("mkdocs", "index.md", ""),
        ("mkdocs", "guide/install.md", "guide/install/"),
        ("mkdocs", "guide/README.md", "guide/"),
        ("docusaurus", "01-guide/02-install.md", "guide/install"),
        ("docusaurus", "guide/guide.md", "guide/"),
        ("vitepress", "guide/intro.md", "guide/intro.html"),
        ("vitepress", "guide/index.md", "guide/"),
        ("github", "guide/install.md", "guide/install"),
        ("html", "manual/Thread-Safety.html", "manual/Thread-Safety.html"),
    ],
)
def test_each_style_publishes_pages_where_its_generator_writes_them(style: str, path: str, page: str) -> None:
    assert page_url(SITE, path, style=STYLES[style], paths={path}) == f"{SITE}/{page}"


def test_docusaurus_front_matter_id_and_relative_slug_name_the_page() -> None:
    docusaurus = STYLES["docusaurus"]
    assert page_url(SITE, "guide/a.md", style=docusaurus, page_id="start") == f"{SITE}/guide/start"
    assert page_url(SITE, "guide/a.md", "b", style=docusaurus) == f"{SITE}/guide/b"
    assert page_url(SITE, "guide/a.md", "/b", style=docusaurus) == f"{SITE}/b"


@pytest.mark.parametrize(
    ("files", "style"),
    [
        (["conf.py", "index.rst"], "sphinx"),
        (["../mkdocs.yml", "index.md"], "mkdocs"),
        (["../docusaurus.config.ts", "intro.md"], "docusaurus"),
        ([".vitepress/config.mts", "index.md"], "vitepress"),
        (["index.md"], None),
    ],
)
def test_the_style_is_sniffed_from_the_folder(tmp_path: Path, files: list[str], style: str | None) -> None:
    folder = tmp_path / "site" / "docs"
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x\n")
    assert sniff(folder) == style


def test_without_a_style_each_document_is_anchored_by_its_type(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## Foo & Bar\n\nx\n\n## Foo & Bar\n\ny\n")
    (tmp_path / "b.rst").write_text("B\n=\n\n.. _label:\n\nFoo\n---\n\nx\n")
    files, urls, styles = read_sources([Source(tmp_path, SITE)])
    arrays, content = build_arrays(files, urls=urls, styles=styles)
    index = PassageIndex.of_arrays(arrays, content)
    assert [index.url(n) for n in range(index.passage_count)] == [
        f"{SITE}/a#foo--bar",
        f"{SITE}/a#foo--bar-1",
        f"{SITE}/b.html#label",
    ]


def test_an_index_written_before_anchors_were_kept_still_cites_its_headings() -> None:
    files = [CorpusFile("page.md", "Page", "# Page\n\n## Log format & levels\n\nx\n")]
    arrays, content = build_arrays(files, urls={"page.md": f"{SITE}/page"})
    older = {name: array for name, array in arrays.items() if not name.startswith("passage.anchor")}
    check_index(older.__getitem__, frozenset(older), content, LEXICAL)
    assert PassageIndex.of_arrays(older, content).url(0) == f"{SITE}/page#log-format--levels"


def test_an_index_whose_anchors_are_not_one_a_passage_is_refused() -> None:
    files = [CorpusFile("page.md", "Page", "# Page\n\n## One\n\nx\n")]
    arrays, content = build_arrays(files)
    arrays["passage.anchor.offsets"] = np.zeros(1, dtype=np.int64)
    arrays["passage.anchor.blob"] = np.zeros(0, dtype=np.uint8)
    with pytest.raises(InvalidIndex, match=r"passage\.anchor does not hold"):
        check_index(arrays.__getitem__, frozenset(arrays), content, LEXICAL)


def test_an_unknown_style_lists_the_styles(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="use one of sphinx, sphinx-dirhtml, mkdocs"):
        style_named("hugo")
    with pytest.raises(SystemExit):
        main(
            ["index", f"{tmp_path}={SITE}", "--site-style", "hugo", "--output", str(tmp_path / "x.anvilidx")]
        )
    assert "'hugo' is not a site style: use one of sphinx, sphinx-dirhtml" in capsys.readouterr().err


def test_a_site_style_without_a_site_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANVIL_EMBEDDINGS", "none")
    target = tmp_path / "x.anvilidx"
    assert main(["index", str(tmp_path), "--site-style", "mkdocs", "--output", str(target)]) == 1
    assert "no SOURCE names a site: give FOLDER=URL" in capsys.readouterr().err
    assert not target.exists()
    with pytest.raises(ValueError, match="ANVIL_CORPUS_SITE names no site"):
        EngineSettings(corpus_site_style="mkdocs")


def test_the_setting_takes_the_same_styles_as_anvil_index() -> None:
    assert typing.get_args(SiteStyleName) == tuple(STYLES)
    assert EngineSettings(corpus_site=SITE, corpus_site_style="sphinx").corpus_site_style == "sphinx"
