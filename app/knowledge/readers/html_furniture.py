"""What of an HTML page a reader never sees: elements hidden from it, and the page's furniture
(navigation bars, banners, footers), which the reader of a passage does not need."""

from __future__ import annotations

import re

#: Landmark roles of a page's furniture (what `nav`, `header` and `footer` are), and classes of
#: navigation bars: texinfo's (`nav-panel`, and `header` before texinfo 7) and the usual others.
FURNITURE_ROLES = frozenset({"navigation", "banner", "contentinfo"})
FURNITURE_CLASSES = frozenset({"nav-panel", "header", "navigation", "navbar", "breadcrumb", "breadcrumbs"})
#: Classes of a heading's permalink (`¶`, `#`), as Sphinx and MkDocs (`headerlink`), VitePress
#: (`header-anchor`), Docusaurus (`hash-link`) and anchor.js (`anchorjs-link`) write it.
PERMALINK_CLASSES = frozenset({"headerlink", "header-anchor", "hash-link", "anchorjs-link"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)


def hidden(attrs: dict[str, str | None]) -> bool:
    """Whether an element with `attrs` is hidden from a reader of the page."""
    return (
        "hidden" in attrs
        or (attrs.get("aria-hidden") or "").strip().lower() == "true"
        or bool(_HIDDEN_STYLE.search(attrs.get("style") or ""))
    )


def furniture(attrs: dict[str, str | None]) -> bool:
    """Whether an element with `attrs` is a page's furniture: a navigation bar, a banner, a
    footer (`FURNITURE_ROLES`, `FURNITURE_CLASSES`), a heading's permalink (`PERMALINK_CLASSES`)."""
    roles = (attrs.get("role") or "").lower().split()
    classes = (attrs.get("class") or "").lower().split()
    return any(role in FURNITURE_ROLES for role in roles) or any(
        c in FURNITURE_CLASSES or c in PERMALINK_CLASSES for c in classes
    )


def unread(attrs: dict[str, str | None]) -> bool:
    """Whether an element with `attrs` is left out of the page's text: hidden, or furniture."""
    return hidden(attrs) or furniture(attrs)
