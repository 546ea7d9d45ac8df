"""The sections of a knowledge index built from documents: each file cut into passages, their
terms numbered and weighed into postings, their texts stored as tables (`build_arrays`).

Cutting is told in bytes, inside a large file too (`cut`): the Markdown parser says how far it is
through a document, so a build of one large file shows it going on rather than nothing at all.
A document whose blocks nest deeper than the parser reads is warned of once, by its source.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.knowledge.chunks import split_blocks
from app.knowledge.corpus import CorpusFile, CorpusPassage, file_passages, shown_text
from app.knowledge.postings import Field
from app.knowledge.readers.markup import HEARD_EVERY, heard_as_bytes
from app.knowledge.sites import SiteStyle, by_type
from app.knowledge.tables import TextTable, string_list
from app.knowledge.tokens import split_compound, tokenize, words
from app.knowledge.vectors import passage_text

logger = logging.getLogger(__name__)

#: What the lexical index is made of; an index built with other rules is not served.
LEXICAL = "bm25-snowball-english-1"
#: The table of each passage's anchor on its page (an index written before it was has none).
ANCHORS = "passage.anchor"
#: Hears (stage, done, of) while an index is built: "reading" and "cutting" in bytes of the
#: documents, "indexing" and "embedding" in passages.
Progress = Callable[[str, int, int], None]


def cut(
    files: Sequence[CorpusFile],
    progress: Progress | None = None,
    styles: Mapping[str, SiteStyle] | None = None,
) -> list[CorpusPassage]:
    """The passages of `files`, in order, each anchored as the site style of its source in
    `styles` says (else as its type's, `sites.by_type`); `progress` hears ("cutting", bytes
    done, bytes of them all) as it goes, from inside a large file too."""
    sizes = [_utf8_size(file.text) for file in files]
    total = sum(sizes)
    passages: list[CorpusPassage] = []
    done = 0
    for file, size in zip(files, sizes, strict=True):
        heard = None
        if progress is not None and size >= HEARD_EVERY:
            heard = heard_as_bytes(lambda at: progress("cutting", at, total), done, size)
        style = (styles or {}).get(file.source) or by_type(file.source)
        passages.extend(
            file_passages(file, heard=heard, warn=_warning_about(file.source), anchors=style.anchors)
        )
        done += size
        if progress is not None:
            progress("cutting", done, total)
    return passages


def _warning_about(source: str) -> Callable[[str], None]:
    return lambda why: logger.warning("corpus: %s: %s", source, why)


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def build_arrays(
    files: Sequence[CorpusFile],
    passages: Sequence[CorpusPassage] | None = None,
    *,
    urls: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    styles: Mapping[str, SiteStyle] | None = None,
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
    """Every section of the index of `files` (or of bare `passages`), and its content header;
    `progress` hears how the cutting into passages and their indexing go; `styles` are the site
    styles of the sources (`cut`)."""
    if passages is None:
        passages = cut(files, progress, styles)
    documents = list(dict.fromkeys(p.source for p in passages))
    headings: list[list[str]] = []
    bodies: list[list[str]] = []
    for done, passage in enumerate(passages, start=1):
        headings.append(tokenize(passage.heading))
        bodies.append(_body_tokens(passage.text))
        if progress is not None and (done % 1000 == 0 or done == len(passages)):
            progress("indexing", done, len(passages))
    terms: dict[str, int] = {}
    for tokens in (*bodies, *headings):
        for token in tokens:
            terms.setdefault(token, len(terms))
    names = {source: _name_tokens(source, terms) for source in documents}
    for heading, passage in zip(headings, passages, strict=True):
        if passage.heading == passage.source.rsplit("/", 1)[-1]:
            heading.extend(names[passage.source])
    whole: dict[str, list[str]] = {source: list(names[source]) for source in documents}
    for passage, heading, body in zip(passages, headings, bodies, strict=True):
        whole[passage.source].extend(heading + body)
    for tokens in whole.values():
        for token in tokens:
            terms.setdefault(token, len(terms))

    def numbered(tokens: list[str]) -> list[int]:
        return [terms[t] for t in tokens]

    size = len(terms)
    body_ids = [numbered(tokens) for tokens in bodies]
    heading_ids = [numbered(tokens) for tokens in headings]
    holders = [list(dict.fromkeys([*h, *b])) for h, b in zip(heading_ids, body_ids, strict=True)]
    document_number = {source: n for n, source in enumerate(documents)}
    exact: dict[str, list[int]] = {}
    for n, passage in enumerate(passages):
        exact.setdefault(" ".join(words(passage.heading.rsplit(" > ", 1)[-1])), []).append(n)
    exact_indptr = np.zeros(len(exact) + 1, dtype=np.int64)
    np.cumsum([len(ids) for ids in exact.values()], out=exact_indptr[1:])
    arrays: dict[str, npt.NDArray[Any]] = {
        "terms": string_list(list(terms)),
        **Field.build(body_ids, size).arrays("body"),
        **Field.build(heading_ids, size).arrays("heading"),
        **Field.build([numbered(whole[s]) for s in documents], size).arrays("whole"),
        **Field.build(holders, size, weighted=False).arrays("holders"),
        "documents": string_list(documents),
        "documents.url": string_list([(urls or {}).get(source, "") for source in documents]),
        "passage.document": np.array([document_number[p.source] for p in passages], dtype=np.int32),
        **TextTable.arrays("passage.heading", (p.heading for p in passages)),
        **TextTable.arrays("passage.text", (p.text for p in passages)),
        **TextTable.arrays(ANCHORS, (p.anchor for p in passages)),
        "file.source": string_list([f.source for f in files]),
        **TextTable.arrays("file.title", (f.title for f in files)),
        **TextTable.arrays("file.text", (shown_text(f) for f in files)),
        "exact.keys": string_list(list(exact)),
        "exact.indptr": exact_indptr,
        "exact.ids": np.array([n for ids in exact.values() for n in ids], dtype=np.int32),
    }
    content = {
        "lexical": LEXICAL,
        "passages": len(passages),
        "documents": len(documents),
        "files": len(files),
        "terms": size,
        # Room for the passage vectors of an embedder; none in a lexical-only index.
        "embedder": None,
    }
    return arrays, content


def passage_texts(arrays: Mapping[str, npt.NDArray[Any]]) -> list[str]:
    """What is embedded of each passage of built sections (`vectors.passage_text`)."""
    headings = TextTable.of(arrays.__getitem__, "passage.heading")
    bodies = TextTable.of(arrays.__getitem__, "passage.text")
    return [passage_text(headings[n], bodies[n]) for n in range(len(bodies))]


def _body_tokens(text: str) -> list[str]:
    """The terms of a passage's text; a code block counts each of its terms once, so that the
    names a code sample repeats (`app`, `client`) do not outweigh the prose."""
    tokens: list[str] = []
    for block, is_code in split_blocks(text):
        found = tokenize(block)
        tokens.extend(dict.fromkeys(found) if is_code else found)
    return tokens


def _name_tokens(source: str, vocabulary: dict[str, int]) -> list[str]:
    """Terms of a file's name ("static-files.md", "staticfiles.md": "static", "file")."""
    stem = source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    found = tokenize(re.sub(r"[-_.]+", " ", stem))
    for word in words(stem):
        found.extend(split_compound(word, vocabulary))
    return found
