"""Readers took time quadratic in what they read: HTML with unclosed nested lists took 0.6, 0.9,
2.4 and 8.5 s at 1k, 2k, 4k and 8k levels and wrote a 1, 4, 16 and 64 MB index (a 94 KiB page
in `ANVIL_CORPUS_DIR` held `/healthz` back 19 s and put 138 MB in the data folder); MDX with a run
of `{` took 1.3, 4.5, 16 and more than 60 s at 5k to 40k characters; one Markdown file of 5, 10
and 20 MiB took 4.4, 9.6 and 27 s, and one of 200 MB was still being cut after 400 s, at 1.5 GB,
without a progress line. Found by a hostile run on 0.5.0; fixed in 0.6.0: every reader is linear
(nesting followed to a cap, past which it is read as text), a document larger than
`ANVIL_MAX_DOCUMENT_BYTES` is skipped with a warning naming it, and `anvil index` counts its
progress in bytes, inside a large document too.

The work is counted (lines of Python run, `support.work`), never timed. The Markdown file's
quadratic cost lay inside one C call a block (a node looked up among its siblings), which no such
count sees: its check here holds the rest of the reading to linear, and the cap bounds what one
file may cost."""

from __future__ import annotations

import os
import pty
import re
import subprocess
from pathlib import Path

from support.anvil_server import TEST_DEFAULTS, anvil_command, run_anvil
from support.anvil_server import anvil_run as anvil
from support.work import LINEAR, growth, lines_run

from app.knowledge.corpus import file_passages
from app.knowledge.readers.documents import read_document

SECTION = "## Section {n}\n\nSome words about the thing, with `code`, *emphasis* and a [link](https://x.example).\n\n"


def nested_lists(levels: int) -> str:
    return "<html><body>" + "<ul><li>item " * levels + "</body></html>"


def work_and_text(text: str, source: str) -> tuple[int, int]:
    def read() -> int:
        file = read_document(text, source)
        return len(file.text) + sum(len(p.text) for p in file_passages(file))

    return lines_run(read)


def linear(text_of: tuple[str, str], twice: tuple[str, str]) -> None:
    (small_work, small_text), (large_work, large_text) = work_and_text(*text_of), work_and_text(*twice)
    assert growth(small_work, large_work) <= LINEAR, (small_work, large_work)
    assert growth(small_text, large_text) <= LINEAR, (small_text, large_text)


def test_html_with_unclosed_nested_lists_is_read_in_linear_work_and_space() -> None:
    linear((nested_lists(1000), "page.html"), (nested_lists(2000), "page.html"))


def test_mdx_with_a_run_of_braces_is_read_in_linear_work() -> None:
    linear(("# Braces\n\n" + "{" * 5000, "page.mdx"), ("# Braces\n\n" + "{" * 10_000, "page.mdx"))


def test_one_large_markdown_file_is_read_in_linear_work() -> None:
    document = "".join(SECTION.format(n=n) for n in range(300))
    twice = "".join(SECTION.format(n=n) for n in range(600))
    linear((document, "big.md"), (twice, "big.md"))


def test_a_nested_page_in_the_corpus_folder_costs_the_server_little(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    page = nested_lists(7500)  # 94 KiB
    assert 90_000 < len(page) < 100_000
    (corpus / "page.html").write_text(page)
    with run_anvil(tmp_path / "data", {"ANVIL_CORPUS_DIR": str(corpus)}) as server:
        kept = sum(path.stat().st_size for path in (server.data_dir / "index-cache").iterdir())
    assert kept < 1_000_000, kept
    assert "its lists nest more than 8 deep" in server.log()


def test_a_document_larger_than_the_cap_is_skipped_by_name(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "huge.md").write_text("".join(SECTION.format(n=n) for n in range(2000)))
    (docs / "small.md").write_text("# Small\n\nRead.\n")
    ran = anvil(
        "index", str(docs), "--output", str(tmp_path / "i.anvilidx"), ANVIL_MAX_DOCUMENT_BYTES="100000"
    )
    assert ran.returncode == 0, ran.stderr
    assert (
        f"corpus: skipped {docs / 'huge.md'}: it is 0.2 MB, more than ANVIL_MAX_DOCUMENT_BYTES (0.1 MB)"
        in (ran.stderr)
    )
    assert "indexed 1 file " in ran.stderr


def test_anvil_index_shows_how_far_it_is_inside_one_large_file(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "big.md").write_text("".join(SECTION.format(n=n) for n in range(25_000)))  # 2.6 MB
    primary, secondary = pty.openpty()  # stderr a terminal: the progress line is rewritten in place
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")} | TEST_DEFAULTS
    try:
        process = subprocess.Popen(
            [*anvil_command(), "index", str(docs), "--output", str(tmp_path / "i.anvilidx")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=secondary,
        )
        os.close(secondary)
        said = b""
        while chunk := _read(primary):
            said += chunk
        assert process.wait(timeout=120) == 0, said
    finally:
        os.close(primary)
    shown = re.findall(r"anvil: ([\d.]+) of ([\d.]+) MB cut into passages", said.decode())
    assert [done for done, of in shown if 0 < float(done) < float(of)], said


def _read(descriptor: int) -> bytes:
    try:
        return os.read(descriptor, 65536)
    except OSError:  # the other end closed: the process has exited
        return b""
