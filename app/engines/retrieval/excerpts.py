"""Quoting a passage: whole when it fits, else the blocks of it that answer, each whole.

A passage's Markdown is read as blocks: paragraphs, fenced code, lists and tables. A block that
introduces what follows it (a sentence ending in a colon before code, a list or a table) is glued
to it, and the items of a list stay together, so a quote never holds an introduction without what
it introduces, nor code without the sentence that says what it is. The groups carrying most of a
question's weight are quoted in reading order, with `[…]` where something was left out between
them. A sentence is never cut: a paragraph too long for the room left gives its sentences that
carry the question's words, whole; code, a list or a table too long is left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from app.knowledge.chunks import split_blocks
from app.knowledge.tokens import tokenize

#: Written between two quoted blocks that were not next to each other.
ELLIPSIS = "[…]"
#: A group is quoted beside the best one when it carries this share of the best one's weight.
ALSO_SHARE = 0.5

Kind = Literal["prose", "code", "list", "table"]

_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][)\"'”]))\s+(?=[^a-z\s])")


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a passage, in reading order: its kind, its Markdown, the terms it holds."""

    kind: Kind
    text: str
    terms: frozenset[str]

    @property
    def introduces(self) -> bool:
        """Whether this paragraph introduces what follows it ("Run this:")."""
        return self.kind == "prose" and self.text.rstrip().endswith(":")


def blocks_of(markdown: str) -> list[Block]:
    """The blocks of a passage's Markdown, in reading order."""
    found: list[Block] = []
    for text, is_code in split_blocks(markdown):
        kind: Kind = "code" if is_code else _kind_of(text)
        found.append(Block(kind, text, frozenset(tokenize(text))))
    return found


def _kind_of(text: str) -> Kind:
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and all(line.lstrip().startswith("|") for line in lines):
        return "table"
    if lines and _ITEM.match(lines[0]):
        return "list"
    return "prose"


def groups_of(blocks: Sequence[Block]) -> list[list[int]]:
    """The blocks (by number) that are quoted together or not at all: an introduction with what it
    introduces, a list's items (a list written with blank lines between its items)."""
    groups: list[list[int]] = []
    for n, block in enumerate(blocks):
        previous = blocks[n - 1] if n else None
        joins = previous is not None and (
            (previous.introduces and block.kind != "prose")
            or (previous.kind == "list" and block.kind == "list")
        )
        if joins:
            groups[-1].append(n)
        else:
            groups.append([n])
    return groups


def quote(markdown: str, weights: Mapping[str, float], limit: int) -> str:
    """The passage whole if it fits in `limit` characters, else the groups of blocks that carry
    most of `weights` (term -> how much it counts), in reading order; "" when nothing fits.

    An introduction with nothing it introduces after it (the passage ends there, its code, list
    or table beginning the next passage; or its image was left out, prose following) is quoted
    without it, since what it introduces is not there."""
    found = blocks_of(markdown)
    blocks = [
        block
        for n, block in enumerate(found)
        if not (block.introduces and (n + 1 == len(found) or found[n + 1].kind == "prose"))
    ]
    dangling = len(blocks) < len(found)
    whole = "\n\n".join(block.text for block in blocks) if dangling else markdown.strip()
    if len(whole) <= limit:
        return whole
    groups = groups_of(blocks)
    texts = ["\n\n".join(blocks[n].text for n in group) for group in groups]
    scores = [_weight(frozenset().union(*(blocks[n].terms for n in group)), weights) for group in groups]
    best = max(scores, default=0.0)
    if best > 0:
        order = sorted(range(len(groups)), key=lambda g: (-scores[g], g))
        wanted = [g for g in order if scores[g] >= ALSO_SHARE * best]
    else:  # the heading matched, not the text: what the section opens with
        wanted = list(range(len(groups)))
    chosen: list[int] = []
    for g in wanted:
        if _length([*chosen, g], texts) <= limit:
            chosen.append(g)
        elif not chosen and best > 0:
            # The best group alone is too long: its sentences that carry the question, if prose.
            sentences = _sentences(groups[g], blocks, weights, limit)
            if sentences:
                return sentences
        if best <= 0 and chosen and g != chosen[-1]:
            break  # the opening, as far as it goes without a gap
    return _joined(sorted(chosen), texts)


def _sentences(
    group: Sequence[int], blocks: Sequence[Block], weights: Mapping[str, float], limit: int
) -> str:
    """The sentences of a too-long paragraph that carry the question's words, whole, in order."""
    if len(group) != 1 or blocks[group[0]].kind != "prose":
        return ""
    sentences = [s for s in _SENTENCE_END.split(" ".join(blocks[group[0]].text.split())) if s.strip()]
    scored = sorted(
        (n for n, s in enumerate(sentences) if _weight(frozenset(tokenize(s)), weights) > 0),
        key=lambda n: (-_weight(frozenset(tokenize(sentences[n])), weights), n),
    )
    kept: list[int] = []
    for n in scored:
        if _length_of([sentences[m] for m in sorted([*kept, n])], " ") <= limit:
            kept.append(n)
    if not kept:
        return ""
    out = ""
    for position, n in enumerate(sorted(kept)):
        if position and n != sorted(kept)[position - 1] + 1:
            out += f" {ELLIPSIS} "
        elif position:
            out += " "
        out += sentences[n]
    return out


def _weight(terms: frozenset[str], weights: Mapping[str, float]) -> float:
    return sum(weights.get(term, 0.0) for term in terms)


def _length(chosen: Sequence[int], texts: Sequence[str]) -> int:
    return len(_joined(sorted(chosen), texts))


def _length_of(parts: Sequence[str], separator: str) -> int:
    return len(separator.join(parts))


def _joined(chosen: Sequence[int], texts: Sequence[str]) -> str:
    """The chosen groups in reading order, `ELLIPSIS` where groups between them were left out."""
    out: list[str] = []
    for position, g in enumerate(chosen):
        if position and g != chosen[position - 1] + 1:
            out.append(ELLIPSIS)
        out.append(texts[g])
    return "\n\n".join(out)
