"""Every link Anvil cites opens a page the generator wrote and an element `id` on it: small sites
built by Sphinx (its `html` and `dirhtml` builders) and MkDocs, their sources indexed with the
matching site style (named, or sniffed from the folder).

Sphinx pins a docutils older than Anvil's, so it runs from a virtual environment of its own
(`.venv-sphinx`, which ./dev.sh test installs; SPHINX_PYTHON may name another Python with Sphinx).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from support.tool_venvs import tool_program

from app.knowledge.build import Source, build
from app.knowledge.index import PassageIndex

ROOT = Path(__file__).resolve().parents[2]
SITE = "https://docs.example.com/v1"

SPHINX_PAGES = {
    "conf.py": 'project = "Widgets"\n',
    "index.rst": (
        "Widgets\n=======\n\n.. toctree::\n\n   config\n   guide/index\n\nWidgets spin.\n\n"
        "Usage\n-----\n\nSpin them.\n\nUsage\n-----\n\nSpin them again.\n"
    ),
    "config.rst": (
        "Configuration\n=============\n\nHow widgets are set up [#f]_.\n\n.. [#f] A footnote.\n\n"
        ".. _raw_enabled:\n\nRaw enabled\n-----------\n\nRaw output is off.\n\n"
        "Log format & levels\n-------------------\n\nLogs are JSON.\n\n"
        "Café options\n------------\n\nCoffee settings.\n\n"
        "thread_safety\n-------------\n\nWidgets are thread-safe.\n\n"
        "Usage\n-----\n\nFirst usage.\n\nUsage\n-----\n\nSecond usage.\n\n"
        "Deep\n~~~~\n\nA subsection.\n\n数据\n----\n\nData.\n"
    ),
    "guide/index.rst": "Guide\n=====\n\n.. toctree::\n\n   install\n\nStart\n-----\n\nBegin here.\n",
    "guide/install.rst": (
        "Install\n=======\n\nInstall it.\n\nOn Linux\n--------\n\nUse apt.\n\n"
        ".. _windows-install:\n\nOn Windows\n----------\n\nUse the installer.\n"
    ),
}

MKDOCS_CONFIG = "site_name: Widgets\nmarkdown_extensions:\n  - attr_list\n  - toc\n"
MKDOCS_PAGES = {
    "index.md": "# Widgets\n\nWidgets spin.\n\n## Usage\n\nSpin them.\n\n## Usage\n\nSpin them again.\n",
    "config.md": (
        "# Configuration\n\nHow widgets are set up.\n\n"
        "## Raw enabled {#raw_enabled}\n\nRaw output is off.\n\n"
        "## Log format & levels\n\nLogs are JSON.\n\n## Café options\n\nCoffee settings.\n\n"
        "## thread_safety\n\nWidgets are thread-safe.\n\n## Usage {: #usage }\n\nExplicit.\n\n"
        "## Usage\n\nFirst usage.\n\n## Usage\n\nSecond usage.\n\n##### Deep\n\nA subsection.\n\n"
        "## 数据\n\nData.\n"
    ),
    "guide/index.md": "# Guide\n\n## Start\n\nBegin here.\n",
    "guide/install.md": "# Install\n\n## On Linux\n\nUse apt.\n\n## On `Windows` 10\n\nUse the installer.\n",
}


def write(folder: Path, pages: dict[str, str]) -> Path:
    for name, text in pages.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def sphinx_python() -> Path:
    return tool_program("SPHINX_PYTHON", ".venv-sphinx", "python")


def run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def sphinx_sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """builder -> (the sources, the site Sphinx built of them), for `html` and `dirhtml`."""
    python = sphinx_python()
    root = tmp_path_factory.mktemp("sphinx")
    source = write(root / "source", SPHINX_PAGES)
    sites = {}
    for builder in ("html", "dirhtml"):
        run([str(python), "-m", "sphinx", "-q", "-E", "-b", builder, str(source), str(root / builder)], root)
        sites[builder] = (source, root / builder)
    return sites


@pytest.fixture(scope="module")
def mkdocs_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the docs folder, the site MkDocs built of it)."""
    root = tmp_path_factory.mktemp("mkdocs")
    (root / "mkdocs.yml").write_text(MKDOCS_CONFIG, encoding="utf-8")
    docs = write(root / "docs", MKDOCS_PAGES)
    run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(root / "site")], root)
    return docs, root / "site"


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.update(value for name, value in attrs if name == "id" and value)


def ids_of(page: Path) -> set[str]:
    parser = _Ids()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.ids


def cited(source: Source, tmp_path: Path) -> Iterator[str]:
    """Every passage's `url` of an index of `source`."""
    target = tmp_path / "site.anvilidx"
    build([source], target)
    index = PassageIndex.open(target)
    try:
        urls = [index.url(n) for n in range(index.passage_count)]
    finally:
        index.close()
    assert urls and all(url is not None for url in urls)
    yield from (url for url in urls if url is not None)


def unresolved(urls: list[str], site: Path) -> list[str]:
    """The links of `urls` whose page the site does not hold, or whose anchor no element's id is."""
    missing = []
    for url in urls:
        assert url.startswith(f"{SITE}/"), url
        parts = urlsplit(url)
        path = unquote(parts.path).removeprefix(urlsplit(SITE).path).lstrip("/")
        page = site / (f"{path}index.html" if path.endswith("/") or not path else path)
        if not page.is_file() or (parts.fragment and unquote(parts.fragment) not in ids_of(page)):
            missing.append(url)
    return missing


def test_every_link_to_a_sphinx_html_site_opens_its_page_and_section(
    sphinx_sites: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    source, site = sphinx_sites["html"]
    urls = list(cited(Source(source, SITE), tmp_path))  # the style sniffed from conf.py

    assert unresolved(urls, site) == []
    assert f"{SITE}/config.html#raw-enabled" in urls
    assert {f"{SITE}/config.html#usage", f"{SITE}/config.html#id3"} <= set(urls)
    assert f"{SITE}/guide/install.html#windows-install" in urls
    assert f"{SITE}/index.html" in urls


def test_every_link_to_a_sphinx_dirhtml_site_opens_its_page_and_section(
    sphinx_sites: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    source, site = sphinx_sites["dirhtml"]
    urls = list(cited(Source(source, SITE, style="sphinx-dirhtml"), tmp_path))

    assert unresolved(urls, site) == []
    assert f"{SITE}/config/#log-format-levels" in urls
    assert f"{SITE}/guide/#start" in urls


def test_every_link_to_a_mkdocs_site_opens_its_page_and_section(
    mkdocs_site: tuple[Path, Path], tmp_path: Path
) -> None:
    docs, site = mkdocs_site
    urls = list(cited(Source(docs, SITE), tmp_path))  # the style sniffed from ../mkdocs.yml

    assert unresolved(urls, site) == []
    assert {f"{SITE}/config/#log-format-levels", f"{SITE}/config/#raw_enabled"} <= set(urls)
    assert {f"{SITE}/config/#usage", f"{SITE}/config/#usage_1", f"{SITE}/config/#usage_2"} <= set(urls)
    assert f"{SITE}/guide/install/#on-windows-10" in urls
    assert f"{SITE}/index.md" not in urls and f"{SITE}/#usage_1" in urls


def test_headings_cited_from_a_built_site_never_show_their_ids(
    mkdocs_site: tuple[Path, Path], tmp_path: Path
) -> None:
    docs, _ = mkdocs_site
    target = tmp_path / "site.anvilidx"
    build([Source(docs, SITE)], target)
    index = PassageIndex.open(target)
    try:
        headings = [index.passage(n).heading for n in range(index.passage_count)]
    finally:
        index.close()
    assert "Configuration > Raw enabled" in headings
    assert not [heading for heading in headings if "{" in heading]
