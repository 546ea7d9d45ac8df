"""A Markdown page's own table of contents, which its site shows and its reader does not need:
a list of links to its sections and nothing else ("- [Warnings](#warnings)", nested as the
sections are), repeating the headings the passages already have. It is left out of the page's
text, with the line just before it that names it ("**Table of contents**", "Contents:"). A list
that holds anything else (one item of prose, a link to another page) is the page's text.
"""

from __future__ import annotations

import re

from markdown_it.tree import SyntaxTreeNode

#: The line over a table of contents, as pages write it (bold or not, with a colon or not).
_NAMED = re.compile(
    r"\**\s*(?:table of contents|contents|on this page|in this (?:page|article))\s*:?\s*\**", re.I
)
_LISTS = ("bullet_list", "ordered_list")
# A table of contents has at least this many links: one link alone is a sentence's worth.
_MIN_LINKS = 2


def is_table_of_contents(node: SyntaxTreeNode) -> bool:
    """Whether the list `node` holds links to sections of its own page and nothing else, each
    item one link (its own list of such links under it allowed)."""
    links = 0
    lists = [node]
    while lists:
        for item in lists.pop().children:
            for child in item.children:
                if child.type in _LISTS:
                    lists.append(child)
                elif child.type == "paragraph" and _one_section_link(child):
                    links += 1
                else:
                    return False
    return links >= _MIN_LINKS


def names_contents(text: str) -> bool:
    """Whether a paragraph's text is the line that names a table of contents."""
    return bool(_NAMED.fullmatch(text.strip()))


def _one_section_link(paragraph: SyntaxTreeNode) -> bool:
    inline = paragraph.children[0] if paragraph.children else None
    if inline is None:
        return False
    parts = [c for c in inline.children if not (c.type == "text" and not c.content.strip())]
    return len(parts) == 1 and parts[0].type == "link" and str(parts[0].attrGet("href") or "").startswith("#")
