"""Turn a passage's Markdown into readable answer pieces, and pick and join the pieces that answer.

A passage is read as units: prose sentences, list items, table rows (written out as plain
"cell — header: cell" lines, never with pipes) and whole fenced code blocks. An answer is a
few units in reading order: the ones carrying most of the question's weight, the code or list
a chosen sentence introduces, never a sentence or a code block cut in two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from app.knowledge.corpus import split_blocks
from app.knowledge.tokens import tokenize

#: A code block longer than this is left out of answers (the citation points at it).
MAX_CODE_CHARS = 700
#: At most this many sentences, items or rows from one passage.
MAX_UNITS = 3
#: At most this many items of a list a chosen sentence introduces.
MAX_LIST_ITEMS = 4

Kind = Literal["sentence", "item", "row", "code"]

_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
_LINK_DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s+\S+")
_MINOR_HEADING = re.compile(r"^\s*#{5,6}\s+")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][)\"'”]))\s+(?=[^a-z\s])")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_SHORTCUT_LINK = re.compile(r"\[([^\[\]\"'=,]+)\](?![(\[:])")
_CODE_SPAN = re.compile(r"(`+[^`]*?`+)")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|])")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True, slots=True)
class Unit:
    """A piece an answer can quote whole: its kind, readable text, terms and block number."""

    kind: Kind
    text: str
    terms: frozenset[str]
    block: int

    @property
    def leads_in(self) -> bool:
        """Whether this sentence introduces what follows it ("Run this:")."""
        return self.kind == "sentence" and self.text.endswith(":")


def units_of(markdown: str) -> tuple[Unit, ...]:
    """The quotable units of a passage's text, in reading order."""
    found: list[Unit] = []
    for number, (block, is_code) in enumerate(split_blocks(markdown)):
        if is_code:
            code = _dedent_block(block)
            found.append(Unit("code", code, frozenset(tokenize(code)), number))
            continue
        for kind, text in _block_units(block.splitlines()):
            found.append(Unit(kind, text, frozenset(tokenize(text)), number))
    return tuple(found)


def _block_units(lines: list[str]) -> list[tuple[Kind, str]]:
    """Sentences, items and rows of one block of prose, a list and/or a table."""
    units: list[tuple[Kind, str]] = []
    prose: list[str] = []
    item: list[str] = []
    table: list[str] = []

    def flush() -> None:
        if prose:
            units.extend(("sentence", s) for s in sentences(inline(" ".join(prose))))
            prose.clear()
        if item:
            text = inline(" ".join(item))
            if text:
                units.append(("item", text))
            item.clear()
        if table:
            units.extend(("row", row) for row in table_rows(table))
            table.clear()

    for line in lines:
        if _LINK_DEFINITION.match(line):
            continue
        if prose and prose[-1].endswith(("`", ":")) and line.lstrip()[:1].isupper():
            flush()
        if line.lstrip().startswith("|") or (table and "|" in line):
            if not table:
                flush()
            table.append(line)
        elif _ITEM.match(line):
            flush()
            item.append(_ITEM.sub("", line, count=1))
        elif item:
            item.append(line.strip())
        else:
            if table:
                flush()
            prose.append(_MINOR_HEADING.sub("", line).strip())
    flush()
    return units


def table_rows(lines: Sequence[str]) -> list[str]:
    """A Markdown table's body rows as plain lines: "first cell — header: cell; header: cell"."""
    rows = [_cells(line) for line in lines if not _TABLE_RULE.match(line)]
    if not rows:
        return []
    has_header = len(lines) > 1 and _TABLE_RULE.match(lines[1]) is not None
    header, body = (rows[0], rows[1:]) if has_header else ([], rows)
    rendered: list[str] = []
    for cells in body:
        first, rest = (cells[0], cells[1:]) if cells else ("", [])
        parts = []
        for n, cell in enumerate(rest, start=1):
            if not cell:
                continue
            name = header[n] if n < len(header) and header[n] else ""
            parts.append(f"{name}: {cell}" if name else cell)
        text = f"{first} — {'; '.join(parts)}" if first and parts else first or "; ".join(parts)
        if text:
            rendered.append(text if text.endswith((".", "!", "?")) else f"{text}.")
    return rendered


def _cells(line: str) -> list[str]:
    stripped = line.strip()
    if stripped.startswith("|"):
        stripped = stripped[1:]
    if stripped.endswith("|") and not stripped.endswith("\\|"):
        stripped = stripped[:-1]
    return [inline(cell) for cell in _CELL_SPLIT.split(stripped)]


def inline(text: str) -> str:
    """Markdown inline markup made plain: link and image syntax, bold and escapes gone (inline
    code is kept as written)."""
    parts = _CODE_SPAN.split(text)
    for n in range(0, len(parts), 2):
        part = _IMAGE.sub("", parts[n])
        part = _LINK.sub(r"\1", part)
        part = _REF_LINK.sub(r"\1", part)
        part = _SHORTCUT_LINK.sub(r"\1", part)
        part = _AUTOLINK.sub(r"\1", part)
        part = _STRONG.sub(r"\2", part)
        parts[n] = _ESCAPED.sub(r"\1", part)
    return " ".join("".join(parts).split())


def sentences(text: str) -> list[str]:
    """The sentences of one paragraph of plain text."""
    return [s for s in _SENTENCE_END.split(text) if s.strip()]


def _dedent_block(block: str) -> str:
    lines = block.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


@dataclass(frozen=True, slots=True)
class Excerpt:
    """Units chosen from one passage, in reading order, with the query terms they cover."""

    units: tuple[Unit, ...]
    covered: frozenset[str]

    def render(self) -> str:
        """The units joined for reading: prose flows, items and rows are listed, code is fenced."""
        out = ""
        previous: Unit | None = None
        for unit in self.units:
            if unit.kind == "code":
                out += f"\n\n{unit.text}\n\n"
            elif unit.kind in ("item", "row"):
                out += f"\n- {unit.text}" if out and not out.endswith("\n\n") else f"- {unit.text}"
            elif previous is not None and previous.kind in ("item", "row"):
                out += f"\n\n{unit.text}"
            else:
                out += f" {unit.text}" if out and not out.endswith("\n") else unit.text
            previous = unit
        return out.strip()

    def without(self, unit: Unit) -> Excerpt:
        """The excerpt with one unit fewer."""
        kept = tuple(u for u in self.units if u is not unit)
        return Excerpt(kept, frozenset(t for u in kept for t in u.terms) & self.covered)


def choose(
    units: Sequence[Unit], weights: Mapping[str, float], *, opening: bool = True, limit: int = MAX_UNITS
) -> Excerpt:
    """The units of one passage that best answer a query whose terms count `weights`.

    The passage's opening sentence (what the section is about; unless `opening` is False), then
    its strongest sentences, items or rows (at least half as strong as the best; `limit` in
    all), the sentence that
    introduces a chosen item, and what a chosen sentence introduces (a short code block, a few
    list items). When no unit carries a query term (the heading matched), the opening is chosen.
    """
    if not units:
        return Excerpt((), frozenset())
    scored = [(_score(unit, weights), n) for n, unit in enumerate(units) if unit.kind != "code"]
    best = max((score for score, _ in scored), default=0.0)
    first = next((n for n, unit in enumerate(units) if unit.kind == "sentence"), None)
    if first is not None and not units[first].text[:1].isupper():
        first = None
    picked: set[int] = set()
    if first is not None and (opening or best == 0):
        picked.add(first)
    if best > 0:
        strong = sorted(
            (item for item in scored if item[0] * 2 >= best), key=lambda item: (-item[0], item[1])
        )
        for _, n in strong:
            if len(picked) >= limit:
                break
            picked.add(n)
    elif first is None:
        picked.update(n for _, n in scored[:2])
    if not picked:
        picked.update([n for n, unit in enumerate(units) if len(unit.text) <= MAX_CODE_CHARS][:1])
    for n in sorted(picked):
        if units[n].kind in ("item", "row"):
            lead = next((m for m in range(n - 1, -1, -1) if units[m].kind not in ("item", "row")), None)
            if lead is not None and units[lead].leads_in:
                picked.add(lead)
    for n in sorted(picked):
        if units[n].leads_in:
            picked.update(_introduced(units, n, picked))
    chosen = tuple(units[n] for n in sorted(picked))
    return Excerpt(chosen, frozenset(t for u in chosen for t in u.terms if t in weights))


def _introduced(units: Sequence[Unit], lead: int, picked: set[int]) -> list[int]:
    """The units right after sentence `lead` that it introduces: one short code block, or items
    (a few, unless some were chosen already)."""
    following = range(lead + 1, len(units))
    if not following:
        return []
    first = following[0]
    if units[first].kind == "code":
        return [first] if len(units[first].text) <= MAX_CODE_CHARS else []
    if units[first].kind in ("item", "row"):
        run: list[int] = []
        for n in following:
            if units[n].kind != units[first].kind or len(run) == MAX_LIST_ITEMS:
                break
            run.append(n)
        return [] if picked.intersection(run) else run
    return []


def _score(unit: Unit, weights: Mapping[str, float]) -> float:
    return sum(weights.get(term, 0.0) for term in unit.terms)


def fit(excerpt: Excerpt, budget: int, weights: Mapping[str, float]) -> str:
    """The excerpt rendered within `budget` characters, dropping code, then the weakest units.

    A single sentence that alone exceeds the budget is cut at a word and marked with an
    ellipsis; a code block is never cut (nothing is left instead).
    """
    while len(rendered := excerpt.render()) > budget and len(excerpt.units) > 1:
        code = [u for u in excerpt.units if u.kind == "code"]
        weakest = code[-1] if code else min(reversed(excerpt.units), key=lambda u: _score(u, weights))
        excerpt = excerpt.without(weakest)
    if len(rendered) > budget and excerpt.units and excerpt.units[0].kind == "code":
        return ""
    return shorten(rendered, budget)


def shorten(text: str, limit: int) -> str:
    """`text` cut at a word boundary to at most `limit` characters, marked with an ellipsis."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return "…"[:limit]
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit - 1].rstrip() + "…"
