"""HTML documents: what a reader of the page sees, cut into passages at its headings, with the
page's machinery, furniture and hidden parts left out, and sloppy markup still read."""

from __future__ import annotations

import html as markup
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.corpus_files import skipped

from app.knowledge.corpus import CorpusFile, CorpusPassage, file_passages
from app.knowledge.corpus_files import read_corpus

PAGE = """\
<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Widgets &amp; gadgets</title>
  <style>body { content: "STYLE-TEXT" }</style>
  <script>var words = "SCRIPT-TEXT";</script>
  <link rel="stylesheet" href="site.css">
</head>
<body>
  <header><a href="/">HEADER-TEXT</a></header>
  <nav><ul><li><a href="/a">NAV-TEXT</a></li></ul></nav>
  <main>
    <h1>Widgets</h1>
    <p>Widgets spin.</p>
    <noscript>NOSCRIPT-TEXT</noscript>
    <template><p>TEMPLATE-TEXT</p></template>
    <div hidden>HIDDEN-TEXT</div>
    <span aria-hidden="true">ARIA-TEXT</span>
    <p style="display: none">DISPLAY-NONE-TEXT</p>
    <!-- COMMENT-TEXT -->
    <svg viewBox="0 0 1 1"><title>SVG-TITLE</title><text>SVG-TEXT</text></svg>
    <form action="/search"><label>FORM-TEXT</label><input name="q"></form>
    <h2>Install</h2>
    <p>Run the installer.</p>
    <aside>ASIDE-TEXT</aside>
  </main>
  <footer>FOOTER-TEXT</footer>
  <script src="app.js"></script>
</body>
</html>
"""

LEFT_OUT = [
    "STYLE",
    "SCRIPT",
    "HEADER",
    "NAV",
    "NOSCRIPT",
    "TEMPLATE",
    "HIDDEN",
    "ARIA",
    "DISPLAY-NONE",
    "COMMENT",
    "SVG",
    "FORM",
    "ASIDE",
    "FOOTER",
]


def read_one(folder: Path, html: str, name: str = "page.html") -> tuple[CorpusFile, list[CorpusPassage]]:
    (folder / name).write_text(html, encoding="utf-8")
    (file,) = [file for file in read_corpus(folder) if file.source == name]
    return file, file_passages(file)


def test_a_page_is_its_visible_text_cut_at_its_headings(tmp_path: Path) -> None:
    file, passages = read_one(tmp_path, PAGE)

    assert file.title == "Widgets & gadgets"
    assert file.text == "# Widgets\n\nWidgets spin.\n\n## Install\n\nRun the installer.\n"
    assert [(p.heading, p.text) for p in passages] == [
        ("Widgets", "Widgets spin."),
        ("Widgets > Install", "Run the installer."),
    ]


def test_scripts_navigation_furniture_and_hidden_parts_are_left_out(tmp_path: Path) -> None:
    file, passages = read_one(tmp_path, PAGE)

    everything = "\n".join([file.title, file.text, *(p.heading + "\n" + p.text for p in passages)])
    assert [word for word in LEFT_OUT if word in everything] == []
    assert "Widgets spin." in everything  # what is visible is there


def test_headings_one_to_six_become_four_levels(tmp_path: Path) -> None:
    html = "".join(f"<h{n}>Level {n}</h{n}><p>Text {n}.</p>" for n in range(1, 7))
    file, passages = read_one(tmp_path, html)

    assert file.title == "Level 1"  # no <title>: the first <h1>
    assert [p.heading for p in passages] == [
        "Level 1",
        "Level 1 > Level 2",
        "Level 1 > Level 2 > Level 3",
        "Level 1 > Level 2 > Level 3 > Level 4",
        "Level 1 > Level 2 > Level 3 > Level 5",
        "Level 1 > Level 2 > Level 3 > Level 6",
    ]


def test_pre_is_a_code_fence_kept_as_written(tmp_path: Path) -> None:
    html = (
        "<h1>Setup</h1><pre>\n# not a heading\n  indented &lt;tag&gt;\n\n```\nfenced\n```</pre>"
        "<pre><code class='language-sh'>anvil <b>serve</b></code></pre>"
    )
    file, passages = read_one(tmp_path, html)

    assert "````\n# not a heading\n  indented <tag>\n\n```\nfenced\n```\n````" in file.text
    assert "```\nanvil serve\n```" in file.text
    assert [p.heading for p in passages] == ["Setup"]
    assert "# not a heading\n  indented <tag>" in passages[0].text


def test_list_items_are_dash_and_number_lines(tmp_path: Path) -> None:
    html = (
        "<h1>Steps</h1><ul><li>one<li>two<ul><li>two and a half</ul></ul>"
        "<ol start=3><li><p>third</p><li>fourth</ol>"
    )
    file, passages = read_one(tmp_path, html)

    assert "- one\n- two\n  - two and a half" in file.text
    assert "3. third\n4. fourth" in file.text
    assert "- two and a half" in passages[0].text


def test_paragraphs_divs_line_breaks_and_table_rows_break_the_text(tmp_path: Path) -> None:
    html = (
        "<h1>Layout</h1><div>first<div>second</div>third</div><p>one<br>two<p>three"
        "<table><thead><tr><th>Name<th>Default</thead><tr><td>speed<td>3<tr><td>a|b<td>4</table>"
        "<table><tr><td>no<td>header</table>"
    )
    _, passages = read_one(tmp_path, html)

    assert passages[0].text == (
        "first\n\nsecond\n\nthird\n\none\ntwo\n\nthree\n\n"
        "| Name | Default |\n| --- | --- |\n| speed | 3 |\n| a\\|b | 4 |\n\n| no | header |"
    )


def test_a_table_laid_out_with_headings_gives_its_cells_in_order(tmp_path: Path) -> None:
    html = "<table><tr><td><h1>Guide</h1><p>Intro.</p></td><td><h2>Part</h2><p>Body.</p></td></tr></table>"
    _, passages = read_one(tmp_path, html)

    assert [(p.heading, p.text) for p in passages] == [("Guide", "Intro."), ("Guide > Part", "Body.")]


def test_entities_are_decoded_and_markup_like_text_is_kept(tmp_path: Path) -> None:
    html = (
        "<h1>Caf&eacute; &#x2615;</h1><p>Fish &amp; chips &lt;b&gt;bold&lt;/b&gt; * _x_ [a](b) &#35; "
        "<code>&lt;folder&gt;</code></p><p># not a heading</p><p>1. not a list</p>"
    )
    file, passages = read_one(tmp_path, html)

    assert file.title == "Café ☕"
    assert [p.text for p in passages] == [
        "Fish & chips <b>bold</b> * _x_ [a](b) # `<folder>`\n\n# not a heading\n\n1. not a list"
    ]


MARKDOWN_LOOKALIKES = [
    "a * b * c",
    "*stars* and __bold__",
    "_x_ and snake_case",
    "[a](b) and ![c](d)",
    "[ref]: http://example.com",
    "<b>tag</b> <> </>",
    "&amp; and &#35;",
    "`code` and \\ backslash",
    "~~struck~~",
    "# heading",
    "## heading ##",
    "1. ordered",
    "2) ordered",
    "- dash",
    "+ plus",
    "> quote",
    "===",
    "---",
    "***",
    ":::tip title",
    "!!! note",
    "??? note",
    '=== "Tab"',
    "a | b",
]


@pytest.mark.parametrize("text", MARKDOWN_LOOKALIKES)
def test_text_that_reads_like_markdown_is_text_in_paragraphs_headings_and_items(
    tmp_path: Path, text: str
) -> None:
    page = markup.escape(text)
    html = f"<h1>T</h1><p>{page}</p><h2>{page}</h2><ul><li>{page}<li>next</ul>"
    _, passages = read_one(tmp_path, html)

    assert [(p.heading, p.text) for p in passages] == [("T", text), (f"T > {text}", f"- {text}\n- next")]


def test_a_page_with_sloppy_markup_is_still_read(tmp_path: Path) -> None:
    html = (
        "<html><head><title>Sloppy</title><body><h1>Sloppy</h1><p>Unclosed paragraph"
        "<div>Block <span>unclosed span</div></em></b>stray ends"
        "<div><nav>Menu without its end tag</div><p>After the nav."
        "<h2>List</h2><ul><li>one<li>two</p></ul><table><tr><td>cell<tr><td>row</table>"
        "<p>Unclosed at the end <b>bold <i>italic"
    )
    file, passages = read_one(tmp_path, html)

    assert file.title == "Sloppy"
    assert [(p.heading, p.text) for p in passages] == [
        ("Sloppy", "Unclosed paragraph\n\nBlock unclosed span\n\nstray ends\n\nAfter the nav."),
        ("Sloppy > List", "- one\n- two\n\n| cell |\n| row |\n\nUnclosed at the end bold italic"),
    ]
    assert "Menu" not in file.text


def test_an_unclosed_element_that_is_left_out_ends_with_its_parent(tmp_path: Path) -> None:
    html = "<h1>Page</h1><div><aside>Related links</div><p>Main text."
    file, _ = read_one(tmp_path, html)

    assert file.text == "# Page\n\nMain text.\n"


def test_a_title_is_the_first_h1_when_the_page_has_none_and_the_file_name_without_either(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.html").write_text("<title>  </title><h2>Not this</h2><h1>The <em>real</em> one</h1>")
    (tmp_path / "b.htm").write_text("<h2>Only a second level</h2><p>Text.</p>")
    (tmp_path / "c.html").write_text("<svg><title>Icon</title></svg><p>Text.</p>")

    assert [(f.source, f.title) for f in read_corpus(tmp_path)] == [
        ("a.html", "The real one"),
        ("b.htm", "b.htm"),
        ("c.html", "c.html"),
    ]


def test_markup_the_parser_gives_up_on_skips_the_page_by_name_or_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = "<h1>Broken</h1><p>Before.</p><![if-not-a-keyword and more"
    (tmp_path / "broken.html").write_text(broken, encoding="utf-8")
    (tmp_path / "good.html").write_text("<h1>Good</h1>", encoding="utf-8")
    try:
        parser = HTMLParser()
        parser.feed(broken)
        parser.close()
    except AssertionError as error:  # the standard library's parser of this Python gives up
        refused: str | None = f"AssertionError: {error}"
    else:
        refused = None

    files = read_corpus(tmp_path)

    if refused is None:
        assert [f.source for f in files] == ["broken.html", "good.html"]
        assert "Before." in files[0].text
    else:
        assert [f.source for f in files] == ["good.html"]
        assert skipped(caplog) == [
            f"corpus: skipped {tmp_path / 'broken.html'}: the HTML parser gives up on it ({refused}): "
            "correct that markup"
        ]
