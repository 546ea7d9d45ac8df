"""Documents of every format the knowledge index reads, each turned into a `CorpusFile`.

Markdown (`.md`, `.mdx`) is read by `corpus.parse_file` as it is. reStructuredText (`rst`), HTML
(`html`) and plain text (`text`) are written as Markdown first (`markup.Markdown`), so that the
one passage cutter (`corpus.file_passages`, which reads its text as CommonMark) cuts every format
alike: section headings become `#` to `####` lines, code fenced blocks, list items `- ` lines,
and their text is escaped where Markdown would read it as markup. A document that its parser
rejects raises `UnreadableDocument`, which the folder reader turns into a warning.
"""

from __future__ import annotations

from app.knowledge import corpus
from app.knowledge.corpus import CorpusFile
from app.knowledge.readers.markup import Heard, UnreadableDocument, Warn
from app.knowledge.readers.text import read_text

__all__ = ["SUFFIXES", "UnreadableDocument", "read_document"]

#: File name endings of the documents read (a file with any other ending is not looked at).
SUFFIXES = (*corpus.SUFFIXES, ".rst", ".html", ".htm", ".txt")
#: A document larger than this is not read (`ANVIL_MAX_DOCUMENT_BYTES`, whose default it is): at
#: about a megabyte a second through the Markdown parser, 8 MiB is some seconds of a build, and
#: generated pages (an API reference, a changelog) stay under it.
MAX_DOCUMENT_BYTES = 8 << 20


def read_document(
    text: str, source: str, *, heard: Heard | None = None, warn: Warn | None = None
) -> CorpusFile:
    """The document `source` (a path ending in one of `SUFFIXES`) holding `text`; `heard` hears
    the share of a large one read as it goes, `warn` what of it is not read as it says (a nesting
    deeper than the reader's cap, read as text), once for each cause.

    Raises `UnreadableDocument`, and nothing else, when it cannot be read.
    """
    if source.endswith(corpus.SUFFIXES):
        return corpus.parse_file(text, source, heard=heard)
    text = text.removeprefix("\ufeff")
    # Imported here: docutils takes a while to load, and a folder without such files never needs it.
    if source.endswith(".rst"):
        from app.knowledge.readers.rst import read_rst

        return read_rst(text, source, warn=warn)
    if source.endswith((".html", ".htm")):
        from app.knowledge.readers.html import read_html

        return read_html(text, source, heard=heard, warn=warn)
    if source.endswith(".txt"):
        return read_text(text, source)
    raise UnreadableDocument(f"its ending is not one Anvil reads: name it with one of {', '.join(SUFFIXES)}")
