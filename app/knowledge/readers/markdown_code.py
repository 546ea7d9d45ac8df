"""Code blocks of a Markdown document as its passages hold them: a fence labelled with the
language alone, a title from the info string as a line before it, and what twoslash hides left
out (`code_blocks`); `fenced` writes any content as a fence that no line of it closes."""

from __future__ import annotations

import re

from app.knowledge.readers.markup import escape

# twoslash's markers of code hidden from the reader, and its notes to the compiler (`// @errors:
# 2304`, `// @filename: a.ts`) and queries (`//  ^?`) in a `twoslash` block.
_CUT_BEFORE = frozenset({"// ---cut---", "// ---cut-before---"})
_CUT_AFTER = "// ---cut-after---"
_CUT_START = "// ---cut-start---"
_CUT_END = "// ---cut-end---"
_TWOSLASH_NOTE = re.compile(r"//\s*(?:@\w|\^[?|])")


def code_blocks(content: str, info: str, markup: str) -> list[str]:
    """A code block as its blocks: a line of its title, when its info string gives one
    (```` ```js [.env] ```` as VitePress writes it, `title="app.js"` as Docusaurus does), then the
    code as a fence labelled with its language only. Code that twoslash hides goes: every line
    before a `// ---cut---` line (the last, and the line itself), after `// ---cut-after---`,
    between `// ---cut-start---` and `// ---cut-end---`; in a `twoslash` block, also its
    `// @flag` lines and `// ^?` queries."""
    words = info.split()
    language = words[0] if words else ""
    for mark in "{[:":
        language = language.partition(mark)[0]
    title = code_title(info)
    lines = content.split("\n")
    cuts = [n for n, line in enumerate(lines) if line.strip() in _CUT_BEFORE]
    if cuts:
        lines = lines[cuts[-1] + 1 :]
    after = next((n for n, line in enumerate(lines) if line.strip() == _CUT_AFTER), None)
    if after is not None:
        lines = lines[:after]
    kept: list[str] = []
    hiding = False
    for line in lines:
        stripped = line.strip()
        if stripped in (_CUT_START, _CUT_END):
            hiding = stripped == _CUT_START
        elif not hiding and not ("twoslash" in words and _TWOSLASH_NOTE.match(stripped)):
            kept.append(line)
    block = fenced("\n".join(kept), language, markup)
    return [escape(title), block] if title else [block]


def code_title(info: str) -> str:
    """The title an info string gives its code block (`[title]`, `title="title"`), else ""."""
    start = info.find("[")
    end = info.find("]", start + 1)
    if start > 0 and end > start and not info[:start].split()[1:]:  # the language's word, then [..]
        return " ".join(info[start + 1 : end].split())
    for quote in ('"', "'"):
        at = info.find(f"title={quote}")
        if at >= 0:
            end = info.find(quote, at + 7)
            return " ".join(info[at + 7 : end if end >= 0 else len(info)].split())
    return ""


def fenced(content: str, info: str, markup: str) -> str:
    """A code block as a fence that no line of its content closes."""
    char = "~" if markup.startswith("~") or "`" in info else "`"
    runs = [
        len(line.strip()) for line in content.split("\n") if line.strip() and not line.strip(" \t" + char)
    ]
    fence = char * max(3, max(runs, default=0) + 1)
    body = content.removesuffix("\n")
    return f"{fence}{info}\n{body}\n{fence}" if body else f"{fence}{info}\n{fence}"
