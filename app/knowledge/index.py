"""`PassageIndex`: the passages of a corpus and their lexical index, built once and opened fast.

Built from read files (`from_files`, its sections made by `sections.build_arrays`) it is held in
memory; written (`write`) it is one file
(`artifact.py`) that `open` maps without building anything but its lookups: the vocabulary, the
sources and the headings. Passage and file texts stay in the file until a query needs them.

Ranking fields (see the retrieval engine): each passage's text, its headings (with the file's
name for the text before its first heading), and its whole file; plus which passages hold each
term at all, for the share of a question a passage covers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from app.knowledge.artifact import IndexFile, InvalidIndex, write_index
from app.knowledge.calibration import calibrate
from app.knowledge.corpus import CorpusFile, CorpusPassage
from app.knowledge.index_checks import BUILT_AT, built_time, check_index
from app.knowledge.postings import Field, Ids, Vocabulary
from app.knowledge.sections import ANCHORS, LEXICAL, Progress, build_arrays, passage_texts
from app.knowledge.tables import TextTable, strings
from app.knowledge.vectors import EmbedderMismatch, PassageEmbedder, Vectors, embed_arrays, passage_text


class PassageIndex:
    """Passages, the files they come from, and the lexical fields over them."""

    def __init__(
        self,
        get: Callable[[str], npt.NDArray[Any]],
        content: dict[str, Any],
        *,
        version: str,
        built: dict[str, Any],
        source: IndexFile | None = None,
        names: Iterable[str] = (),
    ) -> None:
        self.version = version
        self.built = built
        #: When it was built (seconds since the epoch); None for an index built in memory.
        self.built_at = built_time(built)
        self.content = content
        self._source = source
        self._get = get
        self._names = tuple(names)
        embedder = content.get("embedder")
        #: The embedder of its passage vectors; None for an index ranked by words alone.
        self.embedder: str | None = embedder["name"] if isinstance(embedder, dict) else None
        self.vectors: Vectors | None = get("vectors") if self.embedder is not None else None
        #: What the corpus's own passages and unrelated questions score, to refuse against.
        self.calibration: dict[str, Any] | None = content.get("calibration")
        self.vector_keys: npt.NDArray[np.uint8] | None = (
            get("vectors.keys") if self.embedder is not None else None
        )
        self.vocabulary = Vocabulary(strings(get("terms")))
        self.body = Field.from_arrays(get, "body")
        self.heading = Field.from_arrays(get, "heading")
        self.whole = Field.from_arrays(get, "whole")
        self.holders = Field.from_arrays(get, "holders", weighted=False)
        self.documents = strings(get("documents"))
        self._document_numbers = {source: n for n, source in enumerate(self.documents)}
        self._pages = strings(get("documents.url"))
        self.passage_document: Ids = get("passage.document")
        self._headings = TextTable.of(get, "passage.heading")
        self._texts = TextTable.of(get, "passage.text")
        self._anchors = TextTable.of(get, ANCHORS) if f"{ANCHORS}.blob" in self._names else None
        self._file_numbers = {source: n for n, source in enumerate(strings(get("file.source")))}
        self._file_titles = TextTable.of(get, "file.title")
        self._file_texts = TextTable.of(get, "file.text")
        keys = strings(get("exact.keys"))
        indptr, ids = get("exact.indptr"), get("exact.ids")
        self._exact = {key: (int(indptr[n]), int(indptr[n + 1])) for n, key in enumerate(keys)}
        self._exact_ids: Ids = ids

    @property
    def passage_count(self) -> int:
        return len(self._texts)

    @property
    def document_count(self) -> int:
        """How many documents hold passages (0: every question finds nothing)."""
        return len(self.documents)

    def sections(self) -> dict[str, npt.NDArray[Any]]:
        """Every section, as it would be written again."""
        return {name: self._get(name) for name in self._names}

    def passage_texts(self) -> list[str]:
        """What is embedded of each passage (`vectors.passage_text`)."""
        return [passage_text(self._headings[n], self._texts[n]) for n in range(self.passage_count)]

    def check_embedder(self, embedder: str | None) -> None:
        """`EmbedderMismatch`, naming both, unless its vectors come from `embedder` (None: served by
        words alone, which any index can be)."""
        if embedder is None or embedder == self.embedder:
            return
        if self.embedder is None:
            raise EmbedderMismatch(
                f"the index was built without embeddings and this server embeds with {embedder}: "
                "rebuild it with the same ANVIL_EMBEDDINGS settings as the server, or serve it with "
                "ANVIL_EMBEDDINGS=none"
            )
        raise EmbedderMismatch(
            f"the index's passages were embedded by {self.embedder} and this server embeds with "
            f"{embedder}: rebuild the index with the server's embedder, or configure the server's "
            "ANVIL_EMBEDDINGS settings as the index was built"
        )

    def term(self, term: str) -> int | None:
        return self.vocabulary.numbers.get(term)

    def url(self, n: int) -> str | None:
        """Where passage `n` is published: its page and the anchor of its heading; None when its
        folder named no site."""
        page = self._pages[int(self.passage_document[n])]
        if not page:
            return None
        if self._anchors is not None:
            found = self._anchors[n]
            return f"{page}#{found}" if found else page
        # Written before anchors were kept: the anchor made of the heading, as they were then.
        heading = self._headings[n]
        source = self.documents[int(self.passage_document[n])]
        if " > " not in heading and heading in (source.rsplit("/", 1)[-1], self.file_title(source)):
            return page
        return f"{page}#{anchor(heading.rsplit(' > ', 1)[-1])}"

    def file_title(self, source: str) -> str | None:
        """The title of corpus file `source`, if it is one."""
        n = self._file_numbers.get(source)
        return None if n is None else self._file_titles[n]

    def passage(self, n: int) -> CorpusPassage:
        return CorpusPassage(
            source=self.documents[int(self.passage_document[n])],
            heading=self._headings[n],
            text=self._texts[n],
        )

    def document(self, source: str) -> int | None:
        """The number of the document `source` (a file holding passages), if it is one."""
        return self._document_numbers.get(source)

    def file(self, source: str) -> CorpusFile | None:
        n = self._file_numbers.get(source)
        if n is None:
            return None
        return CorpusFile(source=source, title=self._file_titles[n], text=self._file_texts[n])

    def exact_heading(self, phrase: Sequence[str]) -> Ids:
        """The passages whose own (last) heading is `phrase`, word for word."""
        start, end = self._exact.get(" ".join(phrase), (0, 0))
        return self._exact_ids[start:end]

    def close(self) -> None:
        if self._source is not None:
            self._source.close()

    @classmethod
    def from_files(cls, files: Sequence[CorpusFile], urls: Mapping[str, str] | None = None) -> PassageIndex:
        """The index of `files` (with the page URL of each source in `urls`), in memory."""
        arrays, content = build_arrays(files, urls=urls)
        return cls.of_arrays(arrays, content)

    @classmethod
    def of_arrays(cls, arrays: dict[str, npt.NDArray[Any]], content: dict[str, Any]) -> PassageIndex:
        """The index of `build_arrays`' sections, in memory."""
        return cls(arrays.__getitem__, content, version="", built={}, names=arrays)

    @classmethod
    def from_passages(cls, passages: Iterable[CorpusPassage]) -> PassageIndex:
        """The index of `passages` with no files behind them (`file` finds nothing)."""
        arrays, content = build_arrays((), tuple(passages))
        return cls.of_arrays(arrays, content)

    @classmethod
    def open(
        cls,
        path: Path | str,
        *,
        verify: bool = True,
        copy_to: Path | None = None,
        fill: Callable[[BinaryIO], object] | None = None,
    ) -> PassageIndex:
        """The index written at `path`; `InvalidIndex` (saying why) for anything else, every
        field the server reads checked first (`index_checks`). With `copy_to`, served from a
        private copy in that folder, which `fill` writes if given (see `IndexFile`)."""
        source = IndexFile(path, verify=verify, copy_to=copy_to, fill=fill)
        try:
            check_index(source.array, source.names(), source.content, LEXICAL)
            return cls(
                source.array,
                source.content,
                version=source.version,
                built=source.built,
                source=source,
                names=source.names(),
            )
        except InvalidIndex as error:
            source.close()
            if str(error).startswith(str(path)):  # the file's own check said it
                raise
            raise InvalidIndex(
                f"{path} cannot be served: {error}; rebuild it with this version's `anvil index`"
            ) from None
        except BaseException:
            source.close()
            raise


def write(
    files: Sequence[CorpusFile],
    target: Path,
    *,
    sources: Sequence[str],
    urls: Mapping[str, str] | None = None,
    mode: int = 0o644,
    progress: Progress | None = None,
    embedder: PassageEmbedder | None = None,
    reuse: Mapping[bytes, Vectors] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Build the index of `files` (with the page URL of each source in `urls`; its passages
    embedded by `embedder`, reusing the vectors of `reuse` by key) and write it to `target`
    atomically; returns its version and its content header (what it holds)."""
    arrays, content = build_arrays(files, urls=urls, progress=progress)
    if embedder is not None:
        add_vectors(arrays, content, embedder, reuse, progress)
    return write_arrays(arrays, content, target, sources=sources, mode=mode), content


def write_arrays(
    arrays: Mapping[str, npt.NDArray[Any]],
    content: dict[str, Any],
    target: Path,
    *,
    sources: Sequence[str],
    mode: int = 0o644,
) -> str:
    """Write built sections to `target` atomically, stamped with now and `sources`; its version."""
    built = {"at": time.strftime(BUILT_AT, time.gmtime()), "from": list(sources)}
    return write_index(target, arrays, content, built, mode=mode)


def add_vectors(
    arrays: dict[str, npt.NDArray[Any]],
    content: dict[str, Any],
    embedder: PassageEmbedder,
    reuse: Mapping[bytes, Vectors] | None = None,
    progress: Progress | None = None,
    texts: Sequence[str] | None = None,
    batch: int | None = None,
    into: dict[bytes, Vectors] | None = None,
) -> int:
    """Add the passage vectors of `embedder` to built sections (`texts`: what is embedded of each
    passage, if known); how many passages it embedded (the rest were in `reuse`; each new one is
    put in `into` too, if given, before `progress` hears of its batch)."""
    if texts is None:
        texts = passage_texts(arrays)
    found, embedded = embed_arrays(
        texts,
        embedder,
        reuse,
        None if progress is None else lambda done, of: progress("embedding", done, of),
        batch,
        into,
    )
    arrays.update(found)
    content["embedder"] = {"name": embedder.name, "dimensions": int(found["vectors"].shape[1])}
    content["calibration"] = calibrate(found["vectors"], embedder)
    return embedded


def anchor(heading: str) -> str:
    """The anchor an index written before anchors were kept cites a heading by: lowercased,
    punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")
