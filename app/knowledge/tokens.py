"""The one tokeniser of the retrieval engine: words, split identifiers, stopwords out, stemmed.

The index and every query go through `tokenize`, so a word meets itself whatever its form:
"configuring" and "configuration" share the Snowball (Porter 2) English stem, and an identifier
such as `TestClient` or `HTTPSRedirectMiddleware` also yields its parts ("test", "client").
"""

from __future__ import annotations

import re

import Stemmer

# Kept small on purpose: words like "long" or "keep" carry meaning in questions about storage.
_STOPWORD_TEXT = """
a about all also am an and another any anyone anything are as at be been but by can could did do
does doing else everyone everything for from had has have how i if in into is it its just many me
more much my no not of on or other our should so some someone something such than that the their
them then there these they this those to us was we were what when where which while who whom why
will with would you your
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"[^\W_]+")
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s)>\]]*")
_CASE_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_MIXED_CASE = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
_STEMMER = Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    """The lowercased words of `text`, stopwords included, in order."""
    return _WORD.findall(text.lower())


def tokenize(text: str) -> list[str]:
    """Stemmed content words of `text`, in order; identifiers also give their camel-case parts.

    URLs are left out: their scheme and host words would match every question about HTTP.
    """
    found: list[str] = []
    for word in _WORD.findall(_URL.sub(" ", text) if "://" in text else text):
        lower = word.lower()
        if lower in STOPWORDS or (len(lower) == 1 and not lower.isdigit()):
            continue
        found.append(lower)
        if _MIXED_CASE.search(word):
            found.extend(
                part.lower()
                for part in _CASE_PART.findall(word)
                if len(part) > 1 and part.lower() not in STOPWORDS
            )
    return list(_STEMMER.stemWords(found)) if found else []


def split_compound(word: str, vocabulary: dict[str, int] | frozenset[str] | set[str]) -> list[str]:
    """Stems of the two known words `word` is glued from ("staticfiles"), or [] when none fit.

    Both halves must be at least three letters long and stem to words of `vocabulary`; the most
    even split wins.
    """
    best: list[str] = []
    balance = 0
    for cut in range(3, len(word) - 2):
        head, tail = _STEMMER.stemWords([word[:cut], word[cut:]])
        if head in vocabulary and tail in vocabulary and min(cut, len(word) - cut) > balance:
            best, balance = [head, tail], min(cut, len(word) - cut)
    return best
