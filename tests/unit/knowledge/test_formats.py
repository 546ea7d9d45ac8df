"""Which endings a corpus folder is read in, plain text files, what cannot be read, and an answer
drawn from a folder of every format. reStructuredText and HTML have test_formats_rst.py and
test_formats_html.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.corpus_files import skipped
from support.retrieval import engine_of

from app.knowledge.corpus import CorpusFile, CorpusPassage, file_passages
from app.knowledge.corpus_files import read_corpus
from app.knowledge.readers.documents import SUFFIXES, UnreadableDocument, read_document
from app.knowledge.readers.text import MAX_TITLE_CHARS


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def passages(folder: Path) -> list[CorpusPassage]:
    return [passage for file in read_corpus(folder) for passage in file_passages(file)]


def test_every_document_ending_is_read_and_no_other(tmp_path: Path) -> None:
    for name in ["a.md", "b.mdx", "c.rst", "d.html", "e.htm", "f.txt", "g.pdf", "h.rst.bak", "i.json"]:
        write(tmp_path, name, "Some words.\n")

    assert SUFFIXES == (".md", ".mdx", ".rst", ".html", ".htm", ".txt")
    assert [file.source for file in read_corpus(tmp_path)] == [
        "a.md",
        "b.mdx",
        "c.rst",
        "d.html",
        "e.htm",
        "f.txt",
    ]


def test_markdown_is_read_as_before(tmp_path: Path) -> None:
    write(tmp_path, "guide.md", "---\ntitle: The guide\n---\n# Guide\nRead me.\n")

    assert read_corpus(tmp_path) == [CorpusFile("guide.md", "The guide", "# Guide\nRead me.\n")]


def test_a_text_file_is_its_text_titled_by_its_first_line(tmp_path: Path) -> None:
    text = "\n  Release notes for widgets  \n\nWidgets now spin both ways.\n\nGadgets are faster.\n"
    write(tmp_path, "notes/release.txt", text)

    (file,) = read_corpus(tmp_path)

    assert file == CorpusFile("notes/release.txt", "Release notes for widgets", text)
    assert file_passages(file) == [
        CorpusPassage(
            "notes/release.txt",
            "Release notes for widgets",
            "Release notes for widgets\n\nWidgets now spin both ways.\n\nGadgets are faster.",
        )
    ]


def test_lines_of_a_text_file_that_look_like_markdown_headings_stay_text_but_underlines_make_headings(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "readme.txt",
        "Widgets\n=======\n\n# Not a heading\n## Nor this\n\n"
        "Install\n-------\n```\nnot code\n:::tip\nplain\n",
    )

    found = passages(tmp_path)

    assert {p.heading for p in found} == {"Widgets", "Widgets > Install"}
    text = "\n".join(p.text for p in found)
    for line in ["# Not a heading", "## Nor this", "not code", "plain"]:
        assert line in text
    # The fence line is text, so what follows it is not code: a code block would be fenced anew.
    assert "not code\n:::tip\nplain\n```" not in text


def test_tag_like_words_of_a_text_file_stay_in_its_passages(tmp_path: Path) -> None:
    write(tmp_path, "usage.txt", "Usage\n\nRun anvil index <folder> --output <file> to build it.\n")

    (usage,) = read_corpus(tmp_path)

    assert "Run anvil index <folder> --output <file> to build it." in file_passages(usage)[0].text


def test_indented_code_in_a_text_file_is_kept_as_written(tmp_path: Path) -> None:
    write(tmp_path, "code.txt", "Example\n\n    # a comment, not a heading\n    print(1)\n")

    (file,) = read_corpus(tmp_path)

    assert "    # a comment, not a heading\n    print(1)" in file.text
    assert all("a comment" not in p.heading for p in file_passages(file))
    assert "# a comment, not a heading" in "\n".join(p.text for p in file_passages(file))


def test_a_long_first_line_is_cut_at_a_word_for_the_title(tmp_path: Path) -> None:
    first = "This release brings many small changes to the widget spinner " * 3
    write(tmp_path, "long.txt", f"{first}\nMore.\n")
    write(tmp_path, "word.txt", "x" * 200 + "\n")

    long, word = read_corpus(tmp_path)

    assert len(long.title) <= MAX_TITLE_CHARS and long.title.endswith("…")
    assert first.startswith(long.title.removesuffix("…")) and long.title.removesuffix("…")[-1] != " "
    assert long.title.removesuffix("…") + " " in first  # cut at the end of a word
    assert word.title == "x" * (MAX_TITLE_CHARS - 1) + "…"


def test_a_document_without_a_title_of_its_own_is_titled_by_its_file_name(tmp_path: Path) -> None:
    write(tmp_path, "empty.txt", "\n  \n")
    write(tmp_path, "page.html", "<p>No title here.</p>")
    write(tmp_path, "two.rst", "Text.\n\n- More.\n")

    assert [(f.source, f.title) for f in read_corpus(tmp_path)] == [
        ("empty.txt", "empty.txt"),
        ("page.html", "page.html"),
        ("two.rst", "two.rst"),
    ]


def test_a_byte_order_mark_is_read_past_in_every_format(tmp_path: Path) -> None:
    bom = "\ufeff"
    write(tmp_path, "a.txt", f"{bom}Plain title\nText.\n")
    write(tmp_path, "b.rst", f"{bom}Rst title\n=========\n\nText.\n")
    write(tmp_path, "c.html", f"{bom}<title>Html title</title><p>Text.</p>")

    files = read_corpus(tmp_path)

    assert [f.title for f in files] == ["Plain title", "Rst title", "Html title"]
    assert not any(bom in f.text for f in files)


@pytest.mark.parametrize("name", ["caf.rst", "caf.html", "caf.htm", "caf.txt"])
def test_a_document_that_is_not_utf8_is_skipped_by_name_and_the_rest_read(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "index.md", "# Index\nStart here.\n")
    (tmp_path / name).write_bytes(b"Caf\xe9\n====\n\nOpen late.\n")

    assert [file.source for file in read_corpus(tmp_path)] == ["index.md"]
    assert skipped(caplog) == [
        f"corpus: skipped {tmp_path / name}: it is not UTF-8 text (byte 0xe9 at offset 3): "
        "save it as UTF-8 to have it read"
    ]


def test_read_document_refuses_an_ending_it_does_not_read() -> None:
    with pytest.raises(
        UnreadableDocument, match=r"its ending is not one Anvil reads: name it with one of \.md"
    ):
        read_document("text", "notes.pdf")


def test_line_ends_of_every_format_are_read_as_text_mode_reads_them(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"First\r\nSecond\rThird\r\n")
    (tmp_path / "b.rst").write_bytes(b"Title\r\n=====\r\n\r\nBody text.\r\n")

    text, rst = read_corpus(tmp_path)

    assert text.text == "First\nSecond\nThird\n"
    assert (rst.title, file_passages(rst)) == ("Title", [CorpusPassage("b.rst", "Title", "Body text.")])


CALIBRATION_RST = """\
Flux capacitor
==============

The flux capacitor needs no care in daily use.

Calibration
-----------

Calibrate the flux capacitor with ``anvil calibrate --flux 1.21`` once a month,
after the reactor has cooled down.
"""

KEYS_HTML = """\
<!DOCTYPE html>
<html><head><title>Signing keys</title>
<script>document.write("Rotate the signing keys with the secret script")</script></head>
<body><nav><a href="/">Rotate the signing keys in the navigation</a></nav>
<h1>Signing keys</h1>
<h2>Rotation</h2>
<p>Rotate the signing keys every ninety days with <code>anvil keys rotate</code>;
the old key keeps verifying for a day.</p>
</body></html>
"""


@pytest.mark.anyio
async def test_an_answer_from_a_folder_of_every_format_cites_the_document_that_holds_it(
    tmp_path: Path,
) -> None:
    write(tmp_path, "index.md", "# Anvil\n\nAnvil answers questions about its documents.\n")
    write(tmp_path, "hardware/flux.rst", CALIBRATION_RST)
    write(tmp_path, "security/keys.html", KEYS_HTML)
    write(tmp_path, "notes.txt", "Notes\n\nThe reactor is in the basement.\n")
    engine = engine_of(tmp_path)

    assert engine.document_count == 4
    calibrate = await engine.answer("How often do I calibrate the flux capacitor?", ())
    assert calibrate.sources[0].source == "hardware/flux.rst"
    assert calibrate.sources[0].heading == "Flux capacitor > Calibration"
    assert "once a month" in calibrate.text

    rotate = await engine.answer("How do I rotate the signing keys?", ())
    assert rotate.sources[0].source == "security/keys.html"
    assert rotate.sources[0].heading == "Signing keys > Rotation"
    assert "ninety days" in rotate.text
    assert not any("navigation" in s.text or "secret script" in s.text for s in rotate.sources)

    fetched = await engine.fetch("security/keys.html", 10_000)
    assert fetched is not None and "navigation" not in fetched.text and "ninety days" in fetched.text
