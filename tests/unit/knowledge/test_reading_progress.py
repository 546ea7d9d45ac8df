"""Reading and cutting are told in bytes, from inside a large document too: a build of one large
file says how far it is, rather than nothing until the file is done; a file larger than
`ANVIL_MAX_DOCUMENT_BYTES` is skipped with a warning naming it, without being read."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.corpus_files import skipped

from app.knowledge.corpus_files import read_corpus
from app.knowledge.readers.markup import HEARD_EVERY
from app.knowledge.sections import cut

SECTION = "## Section {n}\n\nSome words about the thing, with `code` and a [link](https://x.example).\n\n"


def large(folder: Path, name: str, size: int) -> Path:
    """A document of about `size` bytes in `folder`."""
    folder.mkdir(exist_ok=True)
    if name.endswith(".html"):
        body = "".join(f"<h2>Section {n}</h2><p>Some words about the thing.</p>" for n in range(size // 50))
        text = f"<html><body>{body}</body></html>"
    else:
        text = "".join(SECTION.format(n=n) for n in range(size // len(SECTION)))
    (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("name", ["big.md", "big.mdx", "big.html"])
def test_reading_and_cutting_one_large_file_say_how_far_they_are_inside_it(tmp_path: Path, name: str) -> None:
    folder = large(tmp_path / "docs", name, 6 * HEARD_EVERY if name.endswith(".html") else 3 * HEARD_EVERY)
    heard: list[tuple[str, int, int]] = []
    files = read_corpus(folder, lambda done, of: heard.append(("reading", done, of)))
    cut(files, lambda stage, done, of: heard.append((stage, done, of)))
    for stage in ("reading", "cutting"):
        said = [(done, of) for was, done, of in heard if was == stage]
        inside = [done for done, of in said if 0 < done < of]
        assert inside and inside == sorted(inside), (stage, said)
        assert said[-1][0] == said[-1][1]  # and the end


def test_a_file_larger_than_the_cap_is_skipped_by_name_without_being_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = large(tmp_path / "docs", "big.md", 200_000)
    (folder / "small.md").write_text("# Small\n\nRead.\n")
    files = read_corpus(folder, max_bytes=100_000)
    assert [file.source for file in files] == ["small.md"]
    size = (folder / "big.md").stat().st_size
    assert skipped(caplog) == [
        f"corpus: skipped {folder / 'big.md'}: it is {size / 1e6:.1f} MB, more than ANVIL_MAX_DOCUMENT_BYTES "
        "(0.1 MB): split it, or raise ANVIL_MAX_DOCUMENT_BYTES"
    ]
