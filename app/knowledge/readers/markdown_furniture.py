"""What a Markdown page carries for its site rather than its reader, left out of its text:

- its own table of contents: a list of links to its sections and nothing else ("- [Warnings]
  (#warnings)", nested as the sections are), which repeats the headings the passages already
  have, with the line just before it that names it ("**Table of contents**", "Contents:"); a
  list that holds anything else (one item of prose, a link to another page) is the page's text;
- a site banner: an HTML block holding one `<h1>` and nothing else, first on a page that has
  headings of its own (`<h1 align="center">Fastify</h1>` atop each of fastify's pages), which
  names the site, not the page (nor does it title the page: `first_title`).
"""

from __future__ import annotations

import re

from markdown_it.tree import SyntaxTreeNode

_TAGS = re.compile(r"<[^<>]*>")

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


def is_banner(html: str, title: str) -> bool:
    """Whether an HTML block is `<h1>`'s `title` and nothing else (`title` being the text of its
    first `<h1>`, "" for none)."""
    return bool(title) and " ".join(_TAGS.sub(" ", html).split()) == title
