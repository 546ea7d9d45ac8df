"""Composing the embedded engine's answer from the passages ranked for a question.

The answer quotes the best passage (the units of it that answer, `excerpts.choose`), cites it,
may quote a second passage close behind it that holds much of what the first misses, and points
at up to two more pages ("See also"). It is never longer than `MAX_ANSWER_CHARS`.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.ports import Answer, Passage
from app.engines.retrieval.excerpts import Excerpt, Unit, choose, fit, shorten, units_of
from app.engines.retrieval.follow_ups import Question
from app.engines.retrieval.lexical import term_weight
from app.engines.retrieval.ranking import Ranked, Ranker

#: The composed answer never grows beyond this many characters.
MAX_ANSWER_CHARS = 1500

NO_MATCH_ANSWER = (
    "I found nothing in the documentation that matches this question. "
    "Try rephrasing it, for example with the name of the feature or setting you mean."
)

#: How many other pages an answer points at, at most, and how well (a share of the best score)
#: they must score.
SEE_ALSO = 2
SEE_ALSO_SHARE = 0.3
#: How many passages are ranked for an answer: the best, and enough behind it to find its
#: see-also pages among passages of the same pages.
CANDIDATES = 1 + SEE_ALSO * 6
#: A second passage is quoted when it holds this share of the question's weight the first
#: excerpt misses, and scores at least `SECOND_SCORE` of the best.
SECOND_SHARE = 0.25
SECOND_SCORE = 0.6


class Quoter:
    """Answers from the passages of one index, keeping the units of each passage it quotes."""

    def __init__(self, ranker: Ranker) -> None:
        self.ranker = ranker
        self.index = ranker.index
        self._units: dict[int, tuple[Unit, ...]] = {}

    def answer(self, question: Question, ranked: Ranked) -> Answer:
        """The answer from `ranked` (at least one passage), citing what it quotes (see the module)."""
        weights = {term: term_weight(self.index, term) * times for term, times in question.query.items()}
        excerpt = choose(self._units_of(ranked[0][0]), weights)
        second = self._second(ranked, excerpt, question.own)
        used = [self.ranker.passage(*ranked[0])]
        if second is not None:
            used.append(self.ranker.passage(*ranked[second[0]]))
        floor = ranked[0][1] * SEE_ALSO_SHARE
        for n, score in ranked[1:]:
            if len(used) > SEE_ALSO or score < floor:
                break
            passage = self.index.passage(n)
            if all(passage.source != p.source for p in used):
                used.append(self.ranker.passage(n, score))

        see_also = used[2:] if second is not None else used[1:]
        tail = f"\n\nSee also: {', '.join(cite(p) for p in see_also)}" if see_also else ""
        lead = f"According to {cite(used[0])}: "
        also = ""
        if second is not None:
            room = (MAX_ANSWER_CHARS - len(lead) - len(tail)) // 3
            also = f"\n\nAlso, from {cite(used[1])}: {second[1].render()}"
            if len(also) > room:
                also = ""
                del used[1]
        body = fit(excerpt, MAX_ANSWER_CHARS - len(lead) - len(also) - len(tail), weights)
        if not body:
            lead = f"See {cite(used[0])}."
        elif body.startswith(("- ", "```", "~~~")):
            lead = lead.rstrip() + "\n"
        return Answer(text=shorten(lead + body + also + tail, MAX_ANSWER_CHARS), sources=tuple(used))

    def _second(self, ranked: Ranked, excerpt: Excerpt, own: Sequence[str]) -> tuple[int, Excerpt] | None:
        """The next passage worth quoting too: close behind the best one, from another section,
        with a sentence holding much of the question's weight that the first excerpt misses."""
        weights = {term: term_weight(self.index, term) for term in own}
        if len(weights) < 2:
            return None
        missing = {t: w for t, w in weights.items() if t not in excerpt.covered}
        enough = SECOND_SHARE * sum(weights.values())
        if sum(missing.values()) < enough:
            return None
        first = self.index.passage(ranked[0][0])
        for position, (n, score) in enumerate(ranked[1:3], start=1):
            passage = self.index.passage(n)
            if (passage.source, passage.heading) == (first.source, first.heading):
                continue
            if score < SECOND_SCORE * ranked[0][1]:
                return None
            extra = choose(self._units_of(n), missing, opening=False, limit=1)
            if sum(missing[t] for t in extra.covered) >= enough:
                return position, extra
            return None
        return None

    def _units_of(self, n: int) -> tuple[Unit, ...]:
        units = self._units.get(n)
        if units is None:
            units = self._units[n] = units_of(self.index.passage(n).text)
        return units


def cite(passage: Passage) -> str:
    """`file (heading)`, or the file alone for the text before its first heading."""
    if passage.heading == passage.source.rsplit("/", 1)[-1]:
        return passage.source
    return f"{passage.source} ({passage.heading})"
