"""Read a Markdown corpus and cut it into passages an answer engine can rank.

A passage is one section under a heading (`#` to `####`), or a chunk of it when the section is
long, so that a hit points the reader at a small, citable piece of a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: Upper bound on a passage's text; sections longer than this are cut at paragraph boundaries.
MAX_PASSAGE_CHARS = 1200

_HEADING = re.compile(r"^(#{1,4})\s+(.+?)(?:\s+#+)?\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, slots=True)
class CorpusPassage:
    """A section (or chunk of one) of a corpus file: its relative path, heading chain and text."""

    source: str
    heading: str
    text: str


def load_corpus(corpus_dir: Path, max_chars: int = MAX_PASSAGE_CHARS) -> list[CorpusPassage]:
    """Every passage of every `*.md` file under `corpus_dir`, files in sorted path order.

    Sources are paths relative to `corpus_dir`, with forward slashes on every platform.
    Raises `NotADirectoryError` when `corpus_dir` is not a directory, so a misconfigured corpus
    fails loudly at start-up rather than answering from nothing.
    """
    if not corpus_dir.is_dir():
        raise NotADirectoryError(f"The corpus directory {corpus_dir} does not exist or is not a directory.")
    files = sorted(corpus_dir.rglob("*.md"), key=lambda path: path.relative_to(corpus_dir).as_posix())
    passages: list[CorpusPassage] = []
    for path in files:
        if not path.is_file():
            continue
        source = path.relative_to(corpus_dir).as_posix()
        passages.extend(split_markdown(path.read_text(encoding="utf-8"), source, max_chars))
    return passages


def split_markdown(markdown: str, source: str, max_chars: int = MAX_PASSAGE_CHARS) -> list[CorpusPassage]:
    """Cut one Markdown document into passages at its headings, chunking long sections.

    Each passage's heading is the chain of enclosing headings joined with " > ". Text before the
    first heading is filed under the document's first `#` title, or its file name when it has none.
    Code fences lose their fence lines but keep the code; lines inside a fence are never headings.
    Sections with no text are dropped.
    """
    sections: list[tuple[tuple[str, ...], list[str]]] = [((), [])]
    chain: list[tuple[int, str]] = []
    in_fence = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else _HEADING.match(line)
        if match is None:
            sections[-1][1].append(line.rstrip())
            continue
        level = len(match.group(1))
        chain = [(lvl, title) for lvl, title in chain if lvl < level]
        chain.append((level, match.group(2)))
        sections.append((tuple(title for _, title in chain), []))

    fallback = _document_title(markdown) or source.rsplit("/", 1)[-1]
    passages: list[CorpusPassage] = []
    for titles, lines in sections:
        heading = " > ".join(titles) if titles else fallback
        passages.extend(
            CorpusPassage(source=source, heading=heading, text=chunk)
            for chunk in chunk_text("\n".join(lines), max_chars)
        )
    return passages


def chunk_text(text: str, max_chars: int = MAX_PASSAGE_CHARS) -> list[str]:
    """Pack the paragraphs of `text` into chunks of at most `max_chars` characters.

    Paragraphs (separated by blank lines) stay whole when they fit; a paragraph longer than
    `max_chars` is cut at sentence or line ends, and failing that at spaces. Empty text gives [].
    """
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = paragraph.strip("\n").rstrip()
        if paragraph.strip():
            pieces.extend(_fit(paragraph, max_chars))
    return _pack(pieces, "\n\n", max_chars)


def _fit(paragraph: str, max_chars: int) -> list[str]:
    """Split one paragraph into pieces no longer than `max_chars`, preferring natural breaks."""
    if len(paragraph) <= max_chars:
        return [paragraph]
    sentences = [s for line in paragraph.splitlines() for s in _SENTENCE_END.split(line) if s.strip()]
    pieces: list[str] = []
    for sentence in sentences:
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 0, max_chars + 1)
            # A single word longer than the limit has no space to cut at; cut it hard.
            cut = cut if cut > 0 else max_chars
            pieces.append(sentence[:cut].rstrip())
            sentence = sentence[cut:].lstrip()
        if sentence:
            pieces.append(sentence)
    return _pack(pieces, " ", max_chars)


def _pack(pieces: list[str], separator: str, max_chars: int) -> list[str]:
    """Greedily join consecutive pieces with `separator` while the result fits in `max_chars`."""
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        candidate = f"{current}{separator}{piece}" if current else piece
        if len(candidate) <= max_chars:
            current = candidate
        else:
            chunks.append(current)
            current = piece
    if current:
        chunks.append(current)
    return chunks


def _document_title(markdown: str) -> str | None:
    """The first level-1 heading outside code fences, if the document has one."""
    in_fence = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (match := _HEADING.match(line)) and len(match.group(1)) == 1:
            return match.group(2)
    return None
