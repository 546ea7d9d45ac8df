"""Template tags of static-site generators (Liquid, Nunjucks, Jinja: `{% ... %}`) in Markdown,
which the site renders and a passage must not show.

Outside code (fenced at any indentation, a line indented by four spaces or a tab, a code span):

- a tag that stands on lines of its own (`{% alert "..." %}`, `{% endalert %}`, an
  `{% include ... %}` spanning a few lines) is left out, and what it wraps is kept;
- what lies between `{% comment %}` and `{% endcomment %}` is left out with them;
- what lies between `{% raw %}` and `{% endraw %}` is kept as written (the site shows its tags
  as text), and the two tags left out;
- a tag inside a line (a shortcode: `{% slack_channel "parents" %}`, a link's target
  `({% page "/tools/" %})`) is replaced by its first quoted argument, or by nothing.

Linear: each tag is looked at once, and one not closed within `MAX_TAG_CHARS` is text.
"""

from __future__ import annotations

import re

#: How long a tag may be before an opening `{%` is taken as text.
MAX_TAG_CHARS = 600

# A fence at any indentation (one inside a list item is indented), and a line indented as code.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_INDENTED = re.compile(r"^(?: {4}|\t)")
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'")
_END_RAW = re.compile(r"\{%-?[ \t]*endraw[ \t]*-?%\}")


def strip_template_tags(markdown: str) -> str:
    """`markdown` without the template tags a reader must not see (see the module)."""
    if "{%" not in markdown:
        return markdown
    out: list[str] = []
    prose: list[str] = []
    fence = ""
    previous = ""  # the line before, and whether it was code
    in_code = False
    for line in markdown.split("\n"):
        opened = _FENCE.match(line)
        if fence:
            out.append(line)
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            in_code = True
        # An indented line after a blank one (or after code) may be code; inside a paragraph it
        # is the paragraph's next line.
        elif opened or (_INDENTED.match(line) and (in_code or not previous.strip())):
            # Code, or what may be: its tags are left as written.
            out.extend(_untagged("\n".join(prose)).split("\n") if prose else [])
            prose = []
            fence = opened.group(1) if opened else ""
            out.append(line)
            in_code = True
        else:
            prose.append(line)
            in_code = in_code and not line.strip()
        previous = line
    if prose:
        out.extend(_untagged("\n".join(prose)).split("\n"))
    return "\n".join(out)


def _untagged(text: str) -> str:
    """`text` (no fenced code in it) with its template tags left out or replaced."""
    pieces: list[str] = []
    done = 0
    at = text.find("{%")
    last_end_comment = text.rfind("endcomment")
    last_end_raw = text.rfind("endraw")  # a raw tag with none after it is searched no further
    commented = False
    while at >= 0:
        end = text.find("%}", at + 2, at + MAX_TAG_CHARS)
        window = max(0, at - MAX_TAG_CHARS)
        line_start = max(window, text.rfind("\n", window, at) + 1)
        if end < 0 or text.count("`", line_start, at) % 2:
            at = text.find("{%", at + 2)
            continue
        tag = text[at + 2 : end].strip(" \t\n-")
        name = tag.split(maxsplit=1)[0] if tag else ""
        if not commented:
            pieces.append(text[done:at])
        done = end + 2
        if name == "comment" and last_end_comment > end:
            commented = True
        elif name == "endcomment":
            commented = False
        elif name == "raw" and not commented and last_end_raw > end:
            close = _END_RAW.search(text, done)
            if close is None:
                last_end_raw = -1  # none after this one, so none after any later one either
            else:
                pieces.append(text[done : close.start()])
                done = close.end()
        elif not commented and not _alone(text, at, done):
            quoted = _QUOTED.search(tag)
            pieces.append(next((g for g in quoted.groups() if g is not None), "") if quoted else "")
        at = text.find("{%", done)
    pieces.append(text[done:])
    return "".join(pieces)


def _alone(text: str, start: int, end: int) -> bool:
    """Whether the tag from `start` to `end` stands on lines of its own (looking no further than
    `MAX_TAG_CHARS` either way: a longer line has more on it)."""
    window = max(0, start - MAX_TAG_CHARS)
    line_start = text.rfind("\n", window, start) + 1
    if line_start == 0 and window > 0:
        return False
    line_end = text.find("\n", end, end + MAX_TAG_CHARS)
    if line_end < 0 and end + MAX_TAG_CHARS < len(text):
        return False
    after = text[end : len(text) if line_end < 0 else line_end]
    return not text[line_start:start].strip() and not after.strip()
