"""Cut a Markdown corpus into passages an answer engine can rank (`corpus_files` reads the folder).

Files are `*.md` and `*.mdx`. YAML front matter is stripped (its `title` names the document);
MDX imports, exports, `{...}` expressions and JSX tags are dropped while the prose inside
components is kept; HTML tags and comments go too, as do MkDocs admonition markers (their
content stays) and mkdocstrings `:::` directives.

A passage is one section under a heading (`#` to `####`), or a chunk of it when the section is
long, so that a hit points the reader at a small, citable piece of a file. Chunks are cut at
paragraph boundaries, and a fenced code block is never cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

#: Upper bound on a passage's text; sections longer than this are cut at paragraph boundaries.
MAX_PASSAGE_CHARS = 1200

#: File name endings of the corpus.
SUFFIXES = (".md", ".mdx")

_HEADING = re.compile(r"^(#{1,4})\s+(.+?)(?:\s+#+)?\s*$")
_HEADING_ANCHOR = re.compile(r"\s*\{#[^}]*\}\s*$")
_HEADING_LINK = re.compile(r"!?\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])")
_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*\r?$\n?", re.S | re.M)
_ADMONITION = re.compile(r"^(\s*)(?:!!!|\?\?\?\+?)\s*[\w-]*(?:\s+\"([^\"]*)\")?\s*$")
_DIRECTIVE = re.compile(r"^(\s*):::\s*\S")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_TAG = re.compile(r"</?[A-Za-z][\w.:-]*(?:\s[^<>]*?)?/?>|<>|</>")
_INLINE_CODE = re.compile(r"(`+[^`\n]*?`+)")
_ESM_LINE = re.compile(r"^\s*(?:import|export)\s.*$", re.M)


@dataclass(frozen=True, slots=True)
class CorpusPassage:
    """A section (or chunk of one) of a corpus file: its relative path, heading chain and text."""

    source: str
    heading: str
    text: str


@dataclass(frozen=True, slots=True)
class CorpusFile:
    """One corpus file: its relative path, title and text (front matter stripped, else as written)."""

    source: str
    title: str
    text: str


def parse_file(markdown: str, source: str) -> CorpusFile:
    """The file `source` holding `markdown`: front matter stripped, titled.

    The title is the front matter's `title`, else the first `#` heading, else the file name.
    """
    front, body = split_front_matter(markdown)
    title = front.get("title")
    if not isinstance(title, str) or not title.strip():
        title = _first_title(body) or source.rsplit("/", 1)[-1]
    return CorpusFile(source=source, title=" ".join(title.split()), text=body)


def split_front_matter(markdown: str) -> tuple[dict[str, object], str]:
    """The YAML front matter of `markdown` (a `---` block at the very top) and the text after it.

    A top block that is not a YAML mapping is not front matter: the text is returned unchanged.
    """
    match = _FRONT_MATTER.match(markdown)
    if match is None:
        return {}, markdown
    try:
        front = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}, markdown
    if not isinstance(front, dict):
        return {}, markdown
    return {str(key): value for key, value in front.items()}, markdown[match.end() :]


def file_passages(file: CorpusFile, max_chars: int = MAX_PASSAGE_CHARS) -> list[CorpusPassage]:
    """Cut one corpus file into passages at its headings, chunking long sections.

    Each passage's heading is the chain of enclosing headings joined with " > ", rooted at the
    front matter title when the document has no `#` heading of its own. Text before the first
    heading is filed under the document's title. Lines inside a code fence are never headings.
    Sections with no text are dropped.
    """
    text = clean_markup(file.text, mdx=file.source.endswith(".mdx"))
    root: list[tuple[int, str]] = []
    if _first_title(text) is None and file.title != file.source.rsplit("/", 1)[-1]:
        root = [(0, file.title)]
    sections: list[tuple[tuple[str, ...], list[str]]] = [((), [])]
    chain = list(root)
    lines = text.splitlines()
    for line, in_code in zip(lines, _fence_flags(lines), strict=True):
        match = None if in_code else _HEADING.match(line)
        if match is None:
            sections[-1][1].append(line.rstrip())
            continue
        level = len(match.group(1))
        chain = [(lvl, title) for lvl, title in chain if lvl < level]
        chain.append((level, _heading_text(match.group(2))))
        sections.append((tuple(title for _, title in chain), []))

    passages: list[CorpusPassage] = []
    for titles, lines in sections:
        heading = " > ".join(titles) if titles else file.title
        passages.extend(
            CorpusPassage(source=file.source, heading=heading, text=chunk)
            for chunk in chunk_text("\n".join(lines), max_chars)
        )
    return passages


def clean_markup(markdown: str, *, mdx: bool = False) -> str:
    """`markdown` without the markup that is not prose; fenced code is left exactly as written.

    Always: HTML comments and tags (their text stays), admonition markers (their indented
    content is kept, dedented; a quoted title stays as a line) and `:::` directives. With `mdx`
    also `{...}` expressions and `import`/`export` lines.
    """
    out: list[str] = []
    prose: list[str] = []
    lines = _unwrap_blocks(markdown.splitlines())
    for line, in_code in zip(lines, _fence_flags(lines), strict=True):
        if in_code:
            if prose:
                out.append(_clean_prose("\n".join(prose), mdx=mdx))
                prose.clear()
            out.append(line)
        else:
            prose.append(line)
    if prose:
        out.append(_clean_prose("\n".join(prose), mdx=mdx))
    return "\n".join(out)


def chunk_text(text: str, max_chars: int = MAX_PASSAGE_CHARS) -> list[str]:
    """Pack the blocks of `text` into chunks of at most `max_chars` characters.

    Blocks are paragraphs (separated by blank lines) and fenced code blocks (blank lines and
    all). Blocks stay whole when they fit; a long table is cut between rows (each piece keeps the
    header), a prose paragraph longer than `max_chars` at sentence or line ends, and failing that
    at spaces. A code block is never cut: one longer than
    `max_chars` makes a chunk of its own. Empty text gives [].
    """
    pieces: list[str] = []
    for block, is_code in split_blocks(text):
        if is_code:
            pieces.append(block)
        elif _is_table(block) and len(block) > max_chars:
            pieces.extend(_table_pieces(block, max_chars))
        else:
            pieces.extend(_fit(block, max_chars))
    return _pack(pieces, "\n\n", max_chars)


def _is_table(block: str) -> bool:
    lines = block.splitlines()
    return len(lines) > 2 and all(line.lstrip().startswith("|") for line in lines) and "-" in lines[1]


def _table_pieces(block: str, max_chars: int) -> list[str]:
    """A long table cut between rows, each piece headed by the table's header and rule lines."""
    lines = block.splitlines()
    head = lines[:2]
    pieces: list[str] = []
    rows: list[str] = []
    for row in lines[2:]:
        if rows and len("\n".join([*head, *rows, row])) > max_chars:
            pieces.append("\n".join([*head, *rows]))
            rows = []
        rows.append(row)
    if rows:
        pieces.append("\n".join([*head, *rows]))
    return pieces


def split_blocks(text: str) -> list[tuple[str, bool]]:
    """The paragraphs and fenced code blocks of `text`, each flagged whether it is code."""
    blocks: list[tuple[str, bool]] = []
    current: list[str] = []
    current_is_code = False

    def close() -> None:
        block = "\n".join(current).strip("\n").rstrip()
        if block.strip():
            blocks.append((block, current_is_code))
        current.clear()

    lines = text.splitlines()
    for line, in_code in zip(lines, _fence_flags(lines), strict=True):
        if in_code != current_is_code or (not in_code and not line.strip()):
            close()
            current_is_code = in_code
        if in_code or line.strip():
            current.append(line)
    close()
    return blocks


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
        if len(candidate) <= max_chars or not current:
            current = candidate
        else:
            chunks.append(current)
            current = piece
    if current:
        chunks.append(current)
    return chunks


def _unwrap_blocks(lines: list[str]) -> list[str]:
    """Lines with admonition markers replaced by their title and their bodies dedented, and
    `:::` directives (with their indented options) dropped."""
    out: list[str] = []
    flags = _fence_flags(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = None if flags[i] else (_ADMONITION.match(line) or _DIRECTIVE.match(line))
        if marker is None:
            out.append(line)
            i += 1
            continue
        indent = len(marker.group(1))
        body: list[str] = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        if marker.re is _ADMONITION:
            if marker.group(2):
                out.extend(["", marker.group(2).strip(), ""])
            out.extend(_unwrap_blocks([_dedent(b, indent + 4) for b in body]))
        out.append("")
    return out


def _dedent(line: str, width: int) -> str:
    stripped = line.lstrip(" ")
    return line[min(width, len(line) - len(stripped)) :]


def _clean_prose(text: str, *, mdx: bool) -> str:
    """Drop comments, tags (and for MDX expressions and ESM lines) outside inline code."""
    text = _HTML_COMMENT.sub("", text)
    if mdx:
        text = _drop_expressions(text)
        text = _ESM_LINE.sub("", text)
    parts = _INLINE_CODE.split(text)
    return "".join(part if n % 2 else _TAG.sub("", part) for n, part in enumerate(parts))


def _drop_expressions(text: str) -> str:
    """`text` without its balanced `{...}` expressions (inline code spans are kept as written)."""
    out: list[str] = []
    for n, part in enumerate(_INLINE_CODE.split(text)):
        if n % 2:
            out.append(part)
            continue
        depth = 0
        start = 0
        kept: list[str] = []
        for i, char in enumerate(part):
            if char == "{":
                if depth == 0:
                    kept.append(part[start:i])
                depth += 1
            elif char == "}" and depth:
                depth -= 1
                if depth == 0:
                    start = i + 1
        kept.append(part[start:])
        out.append("".join(kept))
    return "".join(out)


def _fence_flags(lines: list[str]) -> list[bool]:
    """For each line, whether it belongs to a fenced code block (fence lines included).

    A fence closes with a line of the same fence characters only, at least as many; an
    unclosed fence runs to the end.
    """
    flags: list[bool] = []
    fence: str | None = None
    for line in lines:
        stripped = line.strip()
        if fence is None:
            match = _FENCE.match(line)
            if match:
                run = len(stripped) - len(stripped.lstrip(match.group(1)[0]))
                fence = match.group(1)[0] * run
            flags.append(match is not None)
        else:
            flags.append(True)
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
    return flags


def _heading_text(raw: str) -> str:
    """A heading as cited: anchors like `{#id}`, tags and link targets dropped, spaces collapsed."""
    text = _HEADING_LINK.sub(r"\1", _TAG.sub("", _HEADING_ANCHOR.sub("", raw)))
    return " ".join(text.split()) or raw.strip()


def _first_title(markdown: str) -> str | None:
    """The first level-1 heading outside code fences, if the document has one."""
    lines = markdown.splitlines()
    for line, in_code in zip(lines, _fence_flags(lines), strict=True):
        if not in_code and (match := _HEADING.match(line)) and len(match.group(1)) == 1:
            return _heading_text(match.group(2))
    return None
