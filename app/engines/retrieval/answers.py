"""Composing the embedded engine's answer from the passages ranked for a question.

The reader of an answer is usually an agent's own model, which writes the reply itself: the
engine's job is to quote, faithfully, and to say where from. So the answer is Markdown: the
passage that answers first, then the best passages of up to two other pages that score close
behind it (and, after a first passage too short to answer alone, the passage that follows it),
each headed by its page's title > section and by its link (or its file, when the corpus names
no site), each quoted whole, or, when it is long, by the blocks of it that answer,
whole (`excerpts.quote`). It writes no sentence of its own, and it stays within
`ANVIL_ANSWER_MAX_CHARS`: the first quote takes at most `FIRST_SHARE` of it while others follow,
and a later page whose quote would not fit is left out rather than cut.
"""

from __future__ import annotations

from app.domain.ports import Answer, Passage
from app.engines.retrieval.excerpts import ELLIPSIS, quote
from app.engines.retrieval.follow_ups import Question
from app.engines.retrieval.lexical import term_weight
from app.engines.retrieval.ranking import Ranked, Ranker

#: The answer's size, unless `ANVIL_ANSWER_MAX_CHARS` says otherwise.
MAX_ANSWER_CHARS = 3000

NO_MATCH_ANSWER = (
    "I found nothing in the documentation that matches this question. "
    "Try rephrasing it, for example with the name of the feature or setting you mean."
)

#: How many pages an answer quotes at most.
PAGES = 3
#: Another page is quoted when its best passage scores this share of the best passage's score.
PAGE_SHARE = 0.3
#: A second section of the first page is quoted when it scores this share of the best.
SECTION_SHARE = 0.8
#: How many passages are ranked for an answer: the best, and enough behind it to find the
#: passages of other pages among passages of the same pages.
CANDIDATES = 13
#: The most of the answer's size the first quote takes while other quotes follow it.
FIRST_SHARE = 0.6
#: A first passage shorter than this (a page's one-line opening, a synopsis) is quoted with the
#: passage after it on its page, when no other section of the page is.
SHORT_QUOTE = 200


class Quoter:
    """Answers from the passages of one index (see the module)."""

    def __init__(self, ranker: Ranker, max_chars: int = MAX_ANSWER_CHARS) -> None:
        self.ranker = ranker
        self.index = ranker.index
        self.max_chars = max_chars

    def answer(self, question: Question, ranked: Ranked) -> Answer:
        """The answer from `ranked` (at least one passage), citing each passage it quotes."""
        weights = {term: term_weight(self.index, term) * times for term, times in question.query.items()}
        chosen = self.chosen(ranked)
        parts: list[str] = []
        used: list[Passage] = []
        left = self.max_chars
        for position, (n, score, joined) in enumerate(chosen):
            passage = self.ranker.passage(n, score)
            label = self.label(passage)
            room = left - len(label) - 2 - (2 if parts else 0)
            if position == 0 and len(chosen) > 1:
                room = min(room, int(self.max_chars * FIRST_SHARE) - len(label) - 2)
            text = quote(self._text_of(n, joined), weights, room)
            if not text and position:
                continue  # nothing of it fits: left out, not cut
            part = f"{label}\n\n{text}" if text else label
            parts.append(part)
            used.append(passage)
            left -= len(part) + 2
        return Answer(text="\n\n".join(parts), sources=tuple(used))

    def chosen(self, ranked: Ranked) -> list[tuple[int, float, int | None]]:
        """The passages quoted, in the order quoted, each with another piece of its section
        quoted with it (or None): the best, a second section of its page when it ranks close
        behind, and the best passage of each other page that scores close enough."""
        best_n, best = ranked[0]
        first_page = int(self.index.passage_document[best_n])
        joined: int | None = None
        second: tuple[int, float] | None = None
        others: list[tuple[int, float, int | None]] = []
        pages = {first_page}
        for n, score in ranked[1:]:
            page = int(self.index.passage_document[n])
            close = score >= SECTION_SHARE * best
            if page == first_page and close and joined is None and second is None:
                if self.index.passage(n).heading == self.index.passage(best_n).heading:
                    joined = n  # another piece of the same section: quoted with it, under one heading
                else:
                    second = (n, score)
            elif page not in pages and len(pages) < PAGES and score >= PAGE_SHARE * best:
                pages.add(page)
                others.append((n, score, None))
        if joined is None and second is None and len(self.index.passage(best_n).text) < SHORT_QUOTE:
            second = self._following(best_n, ranked)
            if (
                second is not None
                and self.index.passage(second[0]).heading == self.index.passage(best_n).heading
            ):
                joined, second = second[0], None  # the rest of its section: under the one heading
        first = [(best_n, best, joined)] + ([(*second, None)] if second is not None else [])
        return first + others

    def _following(self, n: int, ranked: Ranked) -> tuple[int, float] | None:
        """The passage after `n` on its page, with its score (the last ranked one's when it was
        not ranked), or None when `n` ends its page."""
        after = n + 1
        documents = self.index.passage_document
        if after >= self.index.passage_count or documents[after] != documents[n]:
            return None
        return after, dict(ranked).get(after, ranked[-1][1])

    def _text_of(self, n: int, other: int | None) -> str:
        """Passage `n`'s text, with `other` (a piece of the same section) joined in reading order."""
        if other is None:
            return self.index.passage(n).text
        first, second = sorted((n, other))
        between = "\n\n" if second == first + 1 else f"\n\n{ELLIPSIS}\n\n"
        return self.index.passage(first).text + between + self.index.passage(second).text

    def label(self, passage: Passage) -> str:
        """`**Title > Section** ([file](link))`, or with the file alone when it has no link."""
        heading = passage.heading
        title = self.index.file_title(passage.source)
        if heading == passage.source.rsplit("/", 1)[-1]:
            heading = title or passage.source
        elif title and not heading.startswith(title):
            heading = f"{title} > {heading}"
        where = f"[{passage.source}]({passage.url})" if passage.url else f"`{passage.source}`"
        return f"**{heading}** ({where})"
