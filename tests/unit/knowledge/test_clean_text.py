"""Markup and metadata stay out of the text that answers quote, in every format, and every page is
titled by its first heading: each test is a small file showing one leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.knowledge.corpus import CorpusFile, CorpusPassage, file_passages, parse_file
from app.knowledge.corpus_files import read_corpus


def read_one(folder: Path, name: str, text: str) -> tuple[CorpusFile, list[CorpusPassage]]:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    (file,) = [file for file in read_corpus(folder) if file.source == name]
    return file, file_passages(file)


def body(passages: list[CorpusPassage]) -> str:
    return "\n\n".join(p.text for p in passages)


# reStructuredText


def test_rst_file_wide_fields_at_the_top_stay_out_and_the_section_titles_the_page(tmp_path: Path) -> None:
    file, passages = read_one(tmp_path, "guide.rst", ":orphan:\n:tocdepth: 2\n\nGuide\n=====\n\nSpin it.\n")

    assert "orphan" not in file.text and "tocdepth" not in file.text
    assert file.title == "Guide"
    assert [(p.heading, p.text) for p in passages] == [("Guide", "Spin it.")]


def test_rst_docinfo_after_the_title_stays_out(tmp_path: Path) -> None:
    text = "Guide\n=====\n\n:Author: Ada Lovelace\n:Version: 2.1\n\nSpin it.\n"
    file, passages = read_one(tmp_path, "guide.rst", text)

    assert "Ada" not in file.text and "Version" not in file.text
    assert [p.text for p in passages] == ["Spin it."]


def test_rst_code_block_none_is_a_fence_without_a_language(tmp_path: Path) -> None:
    text = "Run\n===\n\n.. code-block:: none\n\n   $ widget spin\n\n.. code-block:: python\n\n   spin()\n"
    file, _ = read_one(tmp_path, "run.rst", text)

    assert "none" not in file.text
    assert "```\n$ widget spin\n```" in file.text
    assert "```python\nspin()\n```" in file.text


def test_rst_code_block_with_sphinx_options_keeps_its_code_and_caption(tmp_path: Path) -> None:
    text = (
        "Run\n===\n\n.. code-block:: python\n   :caption: app.py\n   :emphasize-lines: 1\n   :linenos:\n\n"
        "   spin()\n"
    )
    file, passages = read_one(tmp_path, "run.rst", text)

    assert passages[0].text == "app.py\n\n```python\nspin()\n```"
    assert "emphasize" not in file.text


def test_rst_sphinx_roles_read_as_sphinx_shows_them(tmp_path: Path) -> None:
    text = (
        "API\n===\n\nThe request is a :class:`~flask.Request`; use :func:`flask.request`, see "
        ":ref:`the guide <guide-label>` and :doc:`the tutorial <tutorial/index>`, or "
        ":doc:`tutorial/index`.\n\n"
        "Call :meth:`~Widget.spin`, read :attr:`Widget.speed`, :data:`SPEED`, catch :exc:`SpinError`, "
        "set :envvar:`WIDGET_HOME`, run :program:`widget` with :option:`--fast`, press :kbd:`Ctrl-C`, "
        "read :py:attr:`!widget.size`.\n"
    )
    _, passages = read_one(tmp_path, "api.rst", text)

    assert [p.text for p in passages] == [
        "The request is a `Request`; use `flask.request`, see the guide and the tutorial, or tutorial.\n\n"
        "Call `spin`, read `Widget.speed`, `SPEED`, catch `SpinError`, set `WIDGET_HOME`, run `widget` "
        "with `--fast`, press `Ctrl-C`, read `widget.size`."
    ]


def test_rst_interpreted_text_inside_a_word_and_literals_in_emphasis_leave_no_backticks(
    tmp_path: Path,
) -> None:
    text = (
        "Quick\n=====\n\nQuick re`Structured`Text is *read with ``literal`` text* and a `link`_ inside a"
        "word`s`. An escaped \\` backtick stays.\n\n.. _link: https://example.com\n"
    )
    _, passages = read_one(tmp_path, "quick.rst", text)

    assert [p.text for p in passages] == [
        "Quick reStructuredText is read with `literal` text and a link inside awords. An escaped ` "
        "backtick stays."
    ]


def test_rst_table_cells_hold_no_docutils_reports(tmp_path: Path) -> None:
    text = (
        "Rules\n=====\n\n=========  ==========================\nrule       the URL rule\n"
        "view_func  stored in :attr:`view_functions`\n=========  ==========================\n"
    )
    file, _ = read_one(tmp_path, "rules.rst", text)

    assert "| view_func | stored in `view_functions` |" in file.text
    for report in ["ERROR", "INFO", "role", "<string>"]:
        assert report not in file.text


def test_rst_sphinx_directives_give_their_content(tmp_path: Path) -> None:
    text = (
        "Widgets\n=======\n\n.. module:: widgets\n\n.. versionadded:: 2.0\n   Widgets spin both ways.\n\n"
        ".. versionchanged:: 2.1 Faster.\n\n.. deprecated:: 3.0\n\n   Use gadgets.\n\n"
        ".. note:: Oil them.\n\n.. autofunction:: widgets.spin\n\n   Spins the widget.\n\n"
        ".. function:: spin(widget, turns=1)\n   :noindex:\n\n   Turns a widget.\n\n"
        ".. seealso:: The :doc:`gadgets` page.\n\n.. only:: html\n\n   Shown on the web.\n\n"
        ".. tab:: Linux\n\n   Use apt.\n\n.. sidebar-thing:: Side title\n   :width: 30\n\n   Side text.\n\n"
        ".. toctree::\n\n   gadgets\n\n.. literalinclude:: secret.txt\n"
    )
    (tmp_path / "secret.txt").write_text("launch code 0000\n", encoding="utf-8")
    file, passages = read_one(tmp_path, "widgets.rst", text)

    assert [p.text for p in passages] == [
        "Added in version 2.0.\n\nWidgets spin both ways.\n\nChanged in version 2.1.\n\nFaster.\n\n"
        "Deprecated since version 3.0.\n\nUse gadgets.\n\nNote:\n\nOil them.\n\nSpins the widget.\n\n"
        "`spin(widget, turns=1)`\n\nTurns a widget.\n\n**See also**\n\nThe gadgets page.\n\n"
        "Shown on the web.\n\n**Linux**\n\nUse apt.\n\nSide title\n\nSide text."
    ]
    for leak in ["..", "::", "Unknown", "directive", "noindex", "width", "launch code", "toctree"]:
        assert leak not in file.text


def test_rst_tab_and_admonition_titles_are_labels_over_their_text(tmp_path: Path) -> None:
    # As Flask's docs write them: tabs per shell, and a titled note under an example.
    text = (
        "Uploads\n=======\n\n.. tabs::\n\n   .. group-tab:: Bash\n\n      Unix Bash:\n\n"
        "      .. code-block:: text\n\n         $ export FLASK_APP=hello\n\n"
        ".. admonition:: Connection Reset Issue\n\n   You may get a connection reset instead of a 413.\n"
    )
    _, passages = read_one(tmp_path, "uploads.rst", text)

    assert body(passages) == (
        "**Bash**\n\nUnix Bash:\n\n```text\n$ export FLASK_APP=hello\n```\n\n**Connection Reset Issue**\n\n"
        "You may get a connection reset instead of a 413."
    )


# VitePress and Markdown


def test_a_wholly_bold_paragraph_stays_a_bold_label_and_bold_inside_a_sentence_goes(tmp_path: Path) -> None:
    text = "# Start\n\n**Example**\n\n```sh\nrun it\n```\n\nA **bold** word and **two** more.\n"
    _, passages = read_one(tmp_path, "start.md", text)

    assert body(passages) == "**Example**\n\n```sh\nrun it\n```\n\nA bold word and two more."


def test_twoslash_hidden_code_and_notes_stay_out_of_a_fence(tmp_path: Path) -> None:
    text = (
        "# Store\n\n```ts twoslash\n// @errors: 2304\nimport { setup } from './setup'\n"
        "const hidden = setup()\n"
        "// ---cut---\nconst store = createStore()\n//    ^?\n```\n"
    )
    file, passages = read_one(tmp_path, "store.md", text)

    assert [p.text for p in passages] == ["```ts\nconst store = createStore()\n```"]
    assert file.text == text  # the document as written; its passages are what is quoted


@pytest.mark.parametrize(
    ("fence", "title"),
    [
        ("```js [.env.staging]", ".env.staging"),
        ('```js title="src/app.js"', "src/app.js"),
        ("```js{2,3}", None),
        ("```js:line-numbers {1}", None),
    ],
)
def test_a_fence_keeps_only_its_language_and_its_title_is_a_line_before_it(
    tmp_path: Path, fence: str, title: str | None
) -> None:
    _, passages = read_one(tmp_path, "config.md", f"# Config\n\n{fence}\nVITE_KEY=1\n```\n")

    code = "```js\nVITE_KEY=1\n```"
    assert [p.text for p in passages] == [f"{title}\n\n{code}" if title else code]


# HTML


TEXINFO = """\
<html><head><title>Invoking grep (GNU Grep)</title></head><body>
<div class="nav-panel">
<p>Next: <a href="Regular-Expressions.html" rel="next">Regular Expressions</a>, Previous:
<a href="Introduction.html" rel="prev">Introduction</a>, Up: <a href="index.html" rel="up">GNU Grep</a>
[<a href="index.html#SEC_Contents">Contents</a>]</p>
</div>
<hr>
<h2 class="chapter">2 Invoking grep</h2>
<p>The command-line syntax is simple.</p>
<div class="header"><p>Next: <a href="Usage.html">Usage</a></p></div>
<div role="navigation"><a href="#top">Back to the top</a></div>
<div role="contentinfo">Copyright the authors</div>
</body></html>
"""


def test_a_texinfo_navigation_bar_and_navigation_roles_stay_out_of_a_page(tmp_path: Path) -> None:
    file, passages = read_one(tmp_path, "grep.html", TEXINFO)

    assert [(p.heading, p.text) for p in passages] == [
        ("Invoking grep (GNU Grep) > 2 Invoking grep", "The command-line syntax is simple.")
    ]
    for leak in ["Next", "Previous", "Up:", "Contents", "Back to the top", "Copyright"]:
        assert leak not in file.text


def test_a_headings_permalink_stays_out_of_its_text(tmp_path: Path) -> None:
    # Sphinx and MkDocs write a `¶` after each heading, VitePress a zero-width `header-anchor`,
    # Docusaurus a `#`: the heading's own link, not its words.
    page = (
        '<html><body><h1>Install<a class="headerlink" href="#install">¶</a></h1><p>Run it.</p>'
        '<h2 id="x">Next <a class="header-anchor" href="#x">&#8203;</a></h2><p>More.</p>'
        '<h2 id="y">Why<a href="#y" class="hash-link">#</a></h2><p>Because.</p></body></html>'
    )
    file, passages = read_one(
        tmp_path, "install.html", page.replace("<html>", "<html><title>Install — Proj</title>")
    )

    assert [p.heading for p in passages] == ["Install", "Install > Next", "Install > Why"]
    # Titled by its heading, without the site's name the <title> adds after it.
    assert file.title == "Install"


# Plain text


def test_an_underlined_line_of_plain_text_is_a_heading(tmp_path: Path) -> None:
    text = (
        "Gain Root API\n-------------\nThis command gains root.\n\nUsage\n=====\n\nRun it.\n\n"
        "~~~~~\nNotes\n~~~~~\n\nNone.\n"
    )
    file, passages = read_one(tmp_path, "api.txt", text)

    assert file.title == "Gain Root API"
    assert [(p.heading, p.text) for p in passages] == [
        ("Gain Root API", "This command gains root."),
        ("Gain Root API > Usage", "Run it."),
        ("Gain Root API > Usage > Notes", "None."),
    ]
    assert "---" not in file.text and "===" not in file.text


def test_an_overlined_heading_titles_a_plain_text_page(tmp_path: Path) -> None:
    file, _ = read_one(tmp_path, "notes.txt", "=============\nRelease notes\n=============\n\nAll new.\n")

    assert file.title == "Release notes"


# Titles


@pytest.mark.parametrize(
    ("name", "text", "title"),
    [
        ("index.rst", ":orphan:\n\n.. _top:\n\n.. image:: logo.png\n\nWelcome\n=======\n\nHi.\n", "Welcome"),
        ("index.rst", ".. comment\n\n:tocdepth: 1\n\nWelcome\n=======\n\nHi.\n", "Welcome"),
        ("index.rst", "Intro.\n\nFirst\n=====\n\nOne.\n\nSecond\n======\n\nTwo.\n", "First"),
        (
            "README.md",
            '<p align="center"><img src="logo.png"></p>\n\n<h1 align="center">Widgets</h1>\n\nSpin.\n',
            "Widgets",
        ),
        ("README.md", "<!-- badges -->\n[![CI](ci.svg)](ci)\n\n## Widgets\n\nSpin.\n", "Widgets"),
        # A site's banner atop every page names none of them.
        ("guides/db.md", '<h1 align="center">Fastify</h1>\n\n## Database\n\nPools.\n', "Database"),
        ("README.md", '# <img src="logo.png">\n\n## Widgets\n\nSpin.\n', "Widgets"),
        (
            "page.mdx",
            "import Tabs from '@theme/Tabs'\n\n![logo](logo.png)\n\n## Widgets\n\nSpin.\n",
            "Widgets",
        ),
    ],
)
def test_a_page_is_titled_by_its_first_heading_not_its_file_name(
    tmp_path: Path, name: str, text: str, title: str
) -> None:
    file, passages = read_one(tmp_path, name, text)

    assert file.title == title
    # A title that is the first heading roots no passage under itself a second time.
    assert all(not p.heading.startswith(f"{title} > {title}") for p in passages)


def test_template_tags_of_a_static_site_stay_out_and_a_shortcode_reads_as_its_argument() -> None:
    page = (
        "# Leave\n\n"
        '{% alert "Updated guidance" %}\nAsk [the team]({% page "/people/" %}) first.\n{% endalert %}\n\n'
        '{% include "steps.html"\nsteps: travel.steps\ncurrent: 2 %}\n\n'
        "{% comment %}\nDraft: not yet.\n{% endcomment %}\n\n"
        "Write {% raw %}`{{ page.title }}` or {% if x %}{% endraw %} as they are.\n\n"
        'Post in {% slack_channel "leave" %} and see `{% page "x" %}`.\n\n'
        '```liquid\n{% include "kept.html" %}\n```\n\n'
        '- In a list:\n\n    ```liquid\n    {% page "nested" %}\n    ```\n\n'
        '- See [the claims]({% page\n    "/travel/" %}) too.\n'
    )
    text = "\n\n".join(p.text for p in file_passages(parse_file(page, "leave.md")))
    assert "See the claims too." in text and "Ask the team first." in text
    assert 'Post in leave and see `{% page "x" %}`.' in text
    assert '{% include "kept.html" %}' in text and '{% page "nested" %}' in text  # code is code
    assert "Write `{{ page.title }}` or {% if x %} as they are." in text  # raw: kept as written
    assert "Draft" not in text and "steps" not in text and "alert" not in text and "Updated" not in text


def test_a_pages_own_table_of_contents_stays_out_of_its_text(tmp_path: Path) -> None:
    # As fastify's pages begin: the page's heading, then its contents.
    page = (
        "## Warnings\n\n**Table of contents**\n"
        "- [Warnings](#warnings)\n  - [Codes](#codes)\n    - [FSTWRN004](#fstwrn004)\n\n"
        "### Codes\n\nMute one with `--disable-warning`.\n\n"
        "See:\n\n- [the codes](#codes)\n- the Node.js docs\n"
    )
    file, passages = read_one(tmp_path, "Warnings.md", page)

    assert file.title == "Warnings"
    # A list with anything but links to the page's sections is its text, as written.
    assert body(passages) == "Mute one with `--disable-warning`.\n\nSee:\n\n- the codes\n- the Node.js docs"


def test_reference_links_commonmark_cannot_resolve_read_as_their_text(tmp_path: Path) -> None:
    # As undici's pages end: a definition whose label holds brackets stops CommonMark taking it
    # and every definition after it, and the links to them keep their brackets.
    page = (
        "# Agent\n\nA [`Dispatcher`][] that uses a [SOCKS5][] proxy; `pick(list[0][1])` stays.\n\n"
        "[SOCKS5]: https://www.rfc-editor.org/rfc/rfc1928\n"
        "[`request(options[, callback])`]: Dispatcher.md#request\n"
        "[`Dispatcher`]: Dispatcher.md#class-dispatcher\n"
    )
    _, passages = read_one(tmp_path, "Agent.md", page)

    assert body(passages) == "A `Dispatcher` that uses a SOCKS5 proxy; `pick(list[0][1])` stays."
