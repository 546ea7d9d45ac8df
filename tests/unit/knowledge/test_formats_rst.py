"""reStructuredText documents: parsed by docutils, cut into passages at their sections, with
docutils' own reports, other files and raw output kept out, and a document docutils fails on
skipped by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.corpus_files import skipped

from app.knowledge.corpus import CorpusFile, CorpusPassage, file_passages
from app.knowledge.corpus_files import read_corpus

GUIDE = """\
.. A comment that is not text.

============
Widget guide
============

Widgets spin. See :ref:`Installing widgets <install>` and the :doc:`faq`.

.. _install:

Installing
==========

Run the installer.

On Linux
--------

Use the package.

Level four
~~~~~~~~~~

Four deep.

Level five
^^^^^^^^^^

Five deep.

Using
=====

Spin it.
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def read_one(folder: Path, text: str, name: str = "doc.rst") -> tuple[CorpusFile, list[CorpusPassage]]:
    write(folder, name, text)
    (file,) = [file for file in read_corpus(folder) if file.source == name]
    return file, file_passages(file)


def test_sections_become_headings_by_depth_under_the_document_title(tmp_path: Path) -> None:
    file, passages = read_one(tmp_path, GUIDE, "guide.rst")

    assert file.title == "Widget guide"
    headings = [line for line in file.text.splitlines() if line.startswith("#")]
    assert headings == [
        "# Widget guide {#widget\\-guide}",
        "## Installing {#install}",
        "### On Linux {#on\\-linux}",
        "#### Level four {#level\\-four}",
        "#### Level five {#level\\-five}",
        "## Using {#using}",
    ]
    assert [(p.heading, p.text) for p in passages] == [
        ("Widget guide", "Widgets spin. See Installing widgets and the faq."),
        ("Widget guide > Installing", "Run the installer."),
        ("Widget guide > Installing > On Linux", "Use the package."),
        ("Widget guide > Installing > On Linux > Level four", "Four deep."),
        ("Widget guide > Installing > On Linux > Level five", "Five deep."),
        ("Widget guide > Using", "Spin it."),
    ]
    assert "comment" not in file.text


def test_a_document_of_several_top_sections_is_titled_by_its_first(tmp_path: Path) -> None:
    file, passages = read_one(tmp_path, "Intro text.\n\nFirst\n=====\n\nOne.\n\nSecond\n======\n\nTwo.\n")

    assert file.title == "First"
    assert [(p.heading, p.text) for p in passages] == [
        ("First", "Intro text."),
        ("First", "One."),
        ("Second", "Two."),
    ]


SECTION = "Install\n=======\n\nRun it.\n"


@pytest.mark.parametrize(
    ("before", "title"),
    [
        (".. a comment\n\n", "Install"),
        (".. _install:\n\n", "Install"),
        (".. |v| replace:: 2\n\n", "Install"),
        (".. toctree::\n\n   faq\n\n", "Install"),
        (":orphan:\n\n", "Install"),
        (":tocdepth: 2\n\n", "Install"),
        (":orphan:\n\n.. _install:\n\n", "Install"),
        (".. image:: logo.png\n\n", "Install"),
        (".. figure:: logo.png\n\n   The logo.\n\n", "Install"),
        ("Intro.\n\n", "Install"),
    ],
)
def test_the_title_is_the_first_sections_whatever_comes_before_it(
    tmp_path: Path, before: str, title: str
) -> None:
    """What docs/formats.md says of a reStructuredText document's title."""
    file, passages = read_one(tmp_path, before + SECTION)

    assert file.title == title
    assert [line for line in file.text.splitlines() if line.startswith("# Install {#")]
    assert passages[-1].text == "Run it."


def test_literal_blocks_are_code_fences_kept_whole_and_never_headings(tmp_path: Path) -> None:
    text = (
        "Setup\n=====\n\nRun this::\n\n    # not a heading\n    anvil serve\n\n"
        ".. code-block:: markdown\n\n    ```\n    code in a fence\n    ```\n\n>>> 1 + 1\n2\n"
    )
    file, passages = read_one(tmp_path, text)

    assert "```\n# not a heading\nanvil serve\n```" in file.text
    assert "````markdown\n```\ncode in a fence\n```\n````" in file.text
    assert "```\n>>> 1 + 1\n2\n```" in file.text
    assert [p.heading for p in passages] == ["Setup"]
    assert "# not a heading\nanvil serve" in passages[0].text


def test_lists_are_dash_and_number_lines(tmp_path: Path) -> None:
    text = "Steps\n=====\n\n- one\n- two\n\n  - two and a half\n\n3. third\n4. fourth\n"
    file, passages = read_one(tmp_path, text)

    assert "- one\n- two\n  - two and a half" in file.text
    assert "3. third\n4. fourth" in file.text
    assert "- two and a half" in passages[0].text


def test_admonitions_footnotes_and_fields_keep_their_text(tmp_path: Path) -> None:
    text = (
        "Care\n====\n\n.. note:: Oil the widget weekly.\n\n:Author: Ada\n:Version: 2\n\n"
        ".. warning::\n\n   Never spin it backwards.\n\n"
        ".. admonition:: Spare parts\n\n   Keep two bearings.\n\nSee the manual [#]_.\n\n"
        ".. [#] Chapter nine covers bearings.\n"
    )
    _, passages = read_one(tmp_path, text)

    body = "\n\n".join(p.text for p in passages)
    for said in [
        "Author: Ada",
        "Version: 2",
        "Note:",
        "Oil the widget weekly.",
        "Warning:",
        "Never spin it backwards.",
        "Spare parts",
        "Keep two bearings.",
        "Chapter nine covers bearings.",
    ]:
        assert said in body


def test_tables_are_rows_of_text(tmp_path: Path) -> None:
    text = (
        "Settings\n========\n\n"
        "+---------+---------+\n| Name    | Default |\n+=========+=========+\n"
        "| speed   | 3       |\n+---------+---------+\n| a|b     | 4       |\n+---------+---------+\n\n"
        "=====  =====\nOne    Two\n=====  =====\n"
    )
    _, passages = read_one(tmp_path, text)

    assert "| Name | Default |\n| --- | --- |\n| speed | 3 |\n| a\\|b | 4 |" in passages[0].text
    assert "| One | Two |" in passages[0].text


def test_markup_like_text_and_inline_literals_are_kept_as_written(tmp_path: Path) -> None:
    text = "Usage\n=====\n\nRun ``anvil index <folder>`` with a <name> of * stars * and a_b_c.\n"
    file, passages = read_one(tmp_path, text)

    assert passages[0].text == "Run `anvil index <folder>` with a <name> of * stars * and a_b_c."
    assert file.title == "Usage"


def test_docutils_reports_unknown_markup_and_other_files_stay_out(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "secret.txt", "The launch code is 0000.\n")
    text = (
        "Page\n====\n\nBefore.\n\n.. include:: secret.txt\n\n.. literalinclude:: secret.txt\n\n"
        ".. raw:: html\n\n   <b>raw output</b>\n\n.. toctree::\n\n   hidden-entry\n\n"
        ".. csv-table::\n   :file: secret.txt\n\n.. unknown-directive:: argument\n\n"
        "Text with |undefined| substitution and `broken link`_.\n\nAfter.\n"
    )
    file, passages = read_one(tmp_path, text)

    for unwanted in ["launch code", "raw output", "hidden-entry", "directive", "include", "Unknown", "ERROR"]:
        assert unwanted not in file.text
    assert [p.text for p in passages] == [
        "Before.\n\nargument\n\nText with |undefined| substitution and broken link.\n\nAfter."
    ]
    assert capfd.readouterr().err == ""


def test_a_configuration_file_of_docutils_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path, "docutils.conf", "[general]\nfile_insertion_enabled: yes\nraw_enabled: yes\n")
    monkeypatch.setenv("DOCUTILSCONFIG", str(config))
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write(corpus, "secret.txt", "The launch code is 0000.\n")

    file, _ = read_one(corpus, "Page\n====\n\n.. include:: secret.txt\n\n.. raw:: html\n\n   <b>raw</b>\n")

    assert "launch code" not in file.text and "raw" not in file.text


def test_a_document_nested_too_deeply_for_docutils_is_read_as_plain_text_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "good.rst", "Good\n====\n\nReadable.\n")
    # Block quotes nested deeper than docutils' parser can recurse.
    write(tmp_path, "deep.rst", "".join(" " * depth + f"quote {depth}\n\n" for depth in range(400)))

    files = read_corpus(tmp_path)
    assert [(f.source, f.title) for f in files] == [("deep.rst", "quote 0"), ("good.rst", "Good")]
    assert "quote 399" in files[0].text
    (warning,) = [r.getMessage() for r in caplog.records if "docutils" in r.getMessage()]
    assert warning.startswith(
        f"corpus: {tmp_path / 'deep.rst'}: it nests too deeply for docutils, so it is read as plain text: "
        "nest its lists, quotes or sections less deeply to have it read as reStructuredText ("
    )


def test_a_document_docutils_reads_only_an_error_from_is_skipped_saying_what_it_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "long.rst", "Title\n=====\n\n" + "word " * 3000 + "\n")

    assert read_corpus(tmp_path) == []
    assert skipped(caplog) == [
        f"corpus: skipped {tmp_path / 'long.rst'}: docutils reads no text from it (Line 4 exceeds the "
        "line-length-limit.): correct what it reports"
    ]


def test_a_document_without_text_is_read_with_no_text_and_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "empty.rst", "")
    write(tmp_path, "comment.rst", ".. nothing to see\n")
    write(tmp_path, "stub.rst", ".. automodule:: widgets\n   :members:\n")  # for Sphinx, unknown here

    assert read_corpus(tmp_path) == [
        CorpusFile("comment.rst", "comment.rst", ""),
        CorpusFile("empty.rst", "empty.rst", ""),
        CorpusFile("stub.rst", "stub.rst", ""),
    ]
    assert skipped(caplog) == []
