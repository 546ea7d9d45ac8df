"""Site styles: where a documentation generator publishes each page of a source folder, and the
`id` it gives each heading, so that a cited passage links to its own section.

A style is named by `anvil index FOLDER=URL --site-style STYLE` (or `ANVIL_CORPUS_SITE_STYLE`),
else sniffed from the folder (`sniff`: a `conf.py` is Sphinx's, a `mkdocs.yml` MkDocs', ...), else
chosen for each document by its type (`.rst` Sphinx, `.html` as it is, Markdown GitHub's).

Pages (`page_path`): Sphinx's html builder writes `page.html` (`index.html` too), its dirhtml
builder and MkDocs `page/` (an `index` as its folder, and for MkDocs a `README` with no `index`
beside it), Docusaurus `page` (number prefixes dropped; `index`, `README` or the folder's own name
as the folder; front matter `id` and `slug`), VitePress `page.html` (an `index` as its folder),
GitHub's style the path without its ending. HTML documents are cited as they are, in every style.

Anchors (`anchors`): a heading's explicit id comes first (a reStructuredText label or docutils'
own section id, Markdown's `{#id}`, an HTML element's `id`, carried by the readers); else the
generator's slug of its text, made unique in the page as the generator does: Sphinx (docutils)
`id1`, `id2`; Python-Markdown (MkDocs) `_1`, `_2`; github-slugger (GitHub, Docusaurus) and
markdown-it-anchor (VitePress) `-1`, `-2`. The `html` style has no slugs: a heading without an id
is cited by the nearest heading above it that has one, else by its page.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

#: (text, explicit id) of each heading of a page, in order -> the anchor of each (None: none).
Anchors = Callable[[Sequence[tuple[str, str | None]]], list[str | None]]

#: The endings of the documents a generator turns into pages (HTML is published as it is).
_SOURCE_ENDINGS = ("md", "mdx", "rst", "txt")
_NUMBER_PREFIX = re.compile(r"^\d+\s*[-_.]+\s*(?=[^-_.\s])")
_MKDOCS_SEPARATORS = re.compile(r"[-\s]+")
_MKDOCS_DROPPED = re.compile(r"[^\w\s-]")
_MKDOCS_COUNT = re.compile(r"^(.*)_([0-9]+)$")
_VITEPRESS_CONTROL = re.compile(r"[\u0000-\u001f]")
_VITEPRESS_SPECIAL = re.compile(r"[\s~`!@#$%^&*()\-_+=\[\]{}|\\;:\"'\u201c\u201d\u2018\u2019<>,.?/]+")
_VITEPRESS_COMBINING = re.compile(r"[\u0300-\u036f]")


def _slug_github(text: str) -> str:
    """github-slugger: lowercased; letters, marks, numbers, `_`, `-` and spaces kept; spaces as `-`."""
    kept = (c for c in text.lower() if c in "- " or unicodedata.category(c)[0] in "LMN" or c == "_")
    return "".join(kept).replace(" ", "-")


def _slug_mkdocs(text: str) -> str:
    """Python-Markdown's `toc.slugify`: ASCII by NFKD, punctuation dropped, runs of separators `-`."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _MKDOCS_SEPARATORS.sub("-", _MKDOCS_DROPPED.sub("", ascii_text).strip().lower())


def _slug_vitepress(text: str) -> str:
    """VitePress's `slugify` (@mdit-vue/shared)."""
    text = _VITEPRESS_COMBINING.sub("", unicodedata.normalize("NFKD", text))
    text = _VITEPRESS_SPECIAL.sub("-", _VITEPRESS_CONTROL.sub("", text))
    text = re.sub(r"^-+|-+$", "", re.sub(r"-{2,}", "-", text))
    return re.sub(r"^(\d)", r"_\1", text).lower()


def _slug_docutils(text: str) -> str:
    """docutils' `make_id`, which Sphinx gives a section without a label."""
    from docutils.nodes import make_id

    return make_id(text)


def _unique_github(slugs: Sequence[str], explicit: Sequence[str | None]) -> list[str | None]:
    """github-slugger's `slug`: a repeat gets `-1`, `-2`, ... (explicit ids are not counted)."""
    occurrences: dict[str, int] = {}
    found: list[str | None] = []
    for slug, given in zip(slugs, explicit, strict=True):
        if given is not None:
            found.append(given)
            continue
        result = slug
        while result in occurrences:
            occurrences[slug] += 1
            result = f"{slug}-{occurrences[slug]}"
        occurrences[result] = 0
        found.append(result)
    return found


def _unique_mkdocs(slugs: Sequence[str], explicit: Sequence[str | None]) -> list[str | None]:
    """Python-Markdown toc's `unique`: every explicit id taken first, a repeat `_1`, `_2`, ..."""
    used = {given for given in explicit if given is not None}
    found: list[str | None] = []
    for slug, given in zip(slugs, explicit, strict=True):
        if given is not None:
            found.append(given)
            continue
        while slug in used or not slug:
            match = _MKDOCS_COUNT.match(slug)
            slug = f"{match.group(1)}_{int(match.group(2)) + 1}" if match else f"{slug}_1"
        used.add(slug)
        found.append(slug)
    return found


def _unique_vitepress(slugs: Sequence[str], explicit: Sequence[str | None]) -> list[str | None]:
    """markdown-it-anchor's `uniqueSlug`, counted from 1, explicit ids taken in order."""
    used: set[str] = set()
    found: list[str | None] = []
    for slug, given in zip(slugs, explicit, strict=True):
        base = slug if given is None else given
        result, n = base, 1
        while result in used:
            result, n = f"{base}-{n}", n + 1
        used.add(result)
        found.append(result)
    return found


def _unique_docutils(slugs: Sequence[str], explicit: Sequence[str | None]) -> list[str | None]:
    """docutils' `set_id`: a repeat (or an empty slug) gets the next `id1`, `id2`, ..."""
    used = {given for given in explicit if given is not None}
    found: list[str | None] = []
    counter = 0
    for slug, given in zip(slugs, explicit, strict=True):
        if given is not None:
            found.append(given)
            continue
        result = slug
        while not result or result in used:
            counter += 1
            result = f"id{counter}"
        used.add(result)
        found.append(result)
    return found


def _unique_none(slugs: Sequence[str], explicit: Sequence[str | None]) -> list[str | None]:
    """No slugs (a page as it is): a heading's own id, or none."""
    return list(explicit)


def _page_sphinx(stem: str, paths: Collection[str]) -> str:
    return f"{stem}.html"


def _page_directories(stem: str, paths: Collection[str]) -> str:
    folder, _, name = stem.rpartition("/")
    return _folder(folder) if name == "index" else f"{stem}/"


def _page_mkdocs(stem: str, paths: Collection[str]) -> str:
    folder, _, name = stem.rpartition("/")
    if name == "README" and not any(p.rpartition(".")[0] == _joined(folder, "index") for p in paths):
        return _folder(folder)
    return _page_directories(stem, paths)


def _page_vitepress(stem: str, paths: Collection[str]) -> str:
    folder, _, name = stem.rpartition("/")
    return _folder(folder) if name == "index" else f"{stem}.html"


def _page_plain(stem: str, paths: Collection[str]) -> str:
    """The path without its ending, a folder's `index` as the folder (`guide/`)."""
    folder, _, name = stem.rpartition("/")
    return _folder(folder) if name == "index" else stem


def _page_docusaurus(stem: str, paths: Collection[str]) -> str:
    folders = [_NUMBER_PREFIX.sub("", part) for part in stem.split("/")[:-1]]
    name = stem.rpartition("/")[2]
    if name.lower() in ("index", "readme") or (stem.count("/") and name == stem.split("/")[-2]):
        return _folder("/".join(folders))
    return _joined("/".join(folders), _NUMBER_PREFIX.sub("", name))


def _folder(folder: str) -> str:
    return f"{folder}/" if folder else ""


def _joined(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


@dataclass(frozen=True)
class SiteStyle:
    """How one generator names pages and headings: `page` from a document's path without its
    ending (and every document's path), `slug` from a heading's text, `unique` over a page."""

    name: str
    page: Callable[[str, Collection[str]], str]
    slug: Callable[[str], str]
    unique: Callable[[Sequence[str], Sequence[str | None]], list[str | None]]

    def anchors(self, headings: Sequence[tuple[str, str | None]]) -> list[str | None]:
        """The `id` of each (text, explicit id) heading of one page, in order."""
        return self.unique([self.slug(text) for text, _ in headings], [given for _, given in headings])


_GITHUB = SiteStyle("github", _page_plain, _slug_github, _unique_github)
#: Every style, by the name `--site-style` takes.
STYLES: dict[str, SiteStyle] = {
    style.name: style
    for style in (
        SiteStyle("sphinx", _page_sphinx, _slug_docutils, _unique_docutils),
        SiteStyle("sphinx-dirhtml", _page_directories, _slug_docutils, _unique_docutils),
        SiteStyle("mkdocs", _page_mkdocs, _slug_mkdocs, _unique_mkdocs),
        SiteStyle("docusaurus", _page_docusaurus, _slug_github, _unique_github),
        SiteStyle("vitepress", _page_vitepress, _slug_vitepress, _unique_vitepress),
        _GITHUB,
        SiteStyle("html", _page_plain, _slug_github, _unique_none),
    )
}


def style_named(name: str) -> SiteStyle:
    """The style `name`; `ValueError` listing the styles for any other."""
    try:
        return STYLES[name]
    except KeyError:
        raise ValueError(f"{name!r} is not a site style: use one of {', '.join(STYLES)}") from None


def by_type(path: str) -> SiteStyle:
    """The style of a document when its folder names none: `.rst` Sphinx's, HTML as it is, else GitHub's."""
    if path.endswith(".rst"):
        return STYLES["sphinx"]
    if path.endswith((".html", ".htm")):
        return STYLES["html"]
    return _GITHUB


def sniff(folder: Path | str) -> str | None:
    """The style a source folder's generator says (None: none found, each document by its type):
    `conf.py` Sphinx, `mkdocs.yml` (there or in its parent) MkDocs, `docusaurus.config.*` (there or
    in its parent) Docusaurus, `.vitepress/` (there or in its parent) VitePress."""
    if not isinstance(folder, Path):
        return None
    here = folder.resolve()
    if (here / "conf.py").is_file():
        return "sphinx"
    for place in (here, here.parent):
        if (place / "mkdocs.yml").is_file() or (place / "mkdocs.yaml").is_file():
            return "mkdocs"
        if any(place.glob("docusaurus.config.*")):
            return "docusaurus"
        if (place / ".vitepress").is_dir():
            return "vitepress"
    return None


def page_path(style: SiteStyle | None, path: str, paths: Collection[str] = ()) -> str:
    """Where under its site the page of document `path` (relative to its folder) is published:
    HTML as it is, else as `style` says (None: as its type's style does); `paths` are every
    document of the folder (MkDocs publishes a `README` as its folder when no `index` is beside it)."""
    stem, dot, ending = path.rpartition(".")
    if not dot or ending not in _SOURCE_ENDINGS:
        return path
    return (style or by_type(path)).page(stem, paths)


def published_path(style: SiteStyle | None, path: str, published: str) -> str:
    """Where a document's front matter publishes it (`slug` or `url`, relative to the site): for
    Docusaurus a relative slug is under the document's folder."""
    if style is None or style.name != "docusaurus" or published.startswith("/"):
        return published.lstrip("/")
    folder = _page_docusaurus(path.rpartition(".")[0], ()).rpartition("/")[0]
    return _joined(folder, published)


def renamed(style: SiteStyle | None, path: str, page_id: str | None) -> str:
    """The path of a document as its front matter `id` renames it (Docusaurus's only)."""
    if style is None or style.name != "docusaurus" or not page_id or "/" in page_id:
        return path
    return _joined(path.rpartition("/")[0], f"{page_id}.md")
