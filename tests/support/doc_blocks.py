"""The command blocks of a Markdown page, each with the output the page shows beside it, and the
rule for comparing that output with what the commands print.

A page shows output as a ```` ```text ```` block right after the ```` ```bash ```` block it comes
from (only blank lines between). Comparing it with what was printed:

- every number stands for any number (ports, process ids, times, counts and sizes vary);
- `...` within a line stands for any text on that line, and a line of only `...` for any lines,
  none included (an answer's wording, the sources a ranking picks);
- `replacements` first turn what belongs to the run (its server's URL, its data folder, the user
  running it) into what the page shows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
_HEADING = re.compile(r"^(#{1,6}) (.+)$", re.M)
_NUMBER = re.compile(r"\d+")
_TOKEN = re.compile(r"(eyJ[\w-]{16})[\w.-]+")


@dataclass(frozen=True)
class Block:
    """A fenced block of `page`: its language, its text, the heading it is under, and the text
    block that follows it (None when none does)."""

    page: str
    heading: str
    language: str
    text: str
    shown: str | None

    @property
    def key(self) -> tuple[str, str, str]:
        """What names the block: its page, its heading and its first line."""
        return (self.page, self.heading, self.text.splitlines()[0])


def blocks(page: str, language: str = "bash") -> list[Block]:
    """The `language` blocks of `page` (a path from the repository root), in order."""
    markdown = (ROOT / page).read_text(encoding="utf-8")
    fences = list(_FENCE.finditer(markdown))
    # Headings outside the blocks only: a `# comment` in a shell block is no heading.
    prose = list(markdown)
    for fence in fences:
        prose[fence.start() : fence.end()] = " " * (fence.end() - fence.start())
    outside = "".join(prose)
    found = []
    for n, fence in enumerate(fences):
        if fence[1] != language:
            continue
        following = fences[n + 1] if n + 1 < len(fences) else None
        shown = None
        if (
            following is not None
            and following[1] == "text"
            and not markdown[fence.end() : following.start()].strip()
        ):
            shown = following[2]
        headings = _HEADING.findall(outside, 0, fence.start())
        heading = headings[-1][1] if headings else ""
        found.append(Block(page, heading, language, fence[2], shown))
    return found


def shown_pattern(shown: str) -> re.Pattern[str]:
    """The regular expression of what `shown` allows (see the module)."""
    parts = []
    for line in _NUMBER.sub("0", shown).splitlines():
        if line.strip() == "...":
            parts.append(r"(?:.*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.compile("".join(parts))


def differs(shown: str, printed: str, replacements: Mapping[str, str] | None = None) -> str | None:
    """None when `printed` is what `shown` shows, else both, for an assertion's message."""
    for run, page in (replacements or {}).items():
        printed = printed.replace(run, page)
    normal = _NUMBER.sub("0", printed if printed.endswith("\n") else printed + "\n")
    if shown_pattern(shown).fullmatch(normal):
        return None
    # A token is shortened in the message, as a log would have it.
    printed = _TOKEN.sub(r"\1...", printed)
    return f"the page shows:\n{shown}\nbut the command printed:\n{printed}"
