"""What the retrieval room promises of its own shape: a question's follow-up nature is decided
once, each BM25 field is scored once per question, and nothing outside the room reads the
index's postings."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.exchange import Exchange

from app.engines.retrieval import follow_ups, lexical
from app.engines.retrieval.engine import RetrievalEngine
from app.engines.retrieval.follow_ups import read_question
from app.engines.retrieval.ranking import Ranker
from app.knowledge.corpus import CorpusPassage
from app.knowledge.index import PassageIndex, add_vectors

pytestmark = pytest.mark.anyio

APP = Path(__file__).resolve().parents[4] / "app"
ROOM = APP / "engines" / "retrieval"

PASSAGES = [
    CorpusPassage("proxies.md", "Proxies", "Route traffic through a proxy server given as a URL."),
    CorpusPassage("timeouts.md", "Timeouts", "Every call gives up after five seconds unless told."),
    CorpusPassage("retries.md", "Retries", "A failed connection is tried again a few times."),
]


class Fixed:
    """An embedder giving every text the same unit vector."""

    name = "test:fixed"
    batch_size = 8

    def embed(self, texts: Any, *, query: bool) -> Any:
        rows = np.zeros((len(texts), 4), dtype=np.float32)
        rows[:, 0] = 1.0
        return rows

    def close(self) -> None:
        pass


def embedded() -> PassageIndex:
    """The index of `PASSAGES` with `Fixed`'s vectors."""
    built = PassageIndex.from_passages(PASSAGES)
    arrays, content = built.sections(), dict(built.content)
    add_vectors(arrays, content, Fixed())
    return PassageIndex.of_arrays(arrays, content)


async def test_whether_a_question_follows_is_decided_once_per_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: Counter[str] = Counter()
    decide = follow_ups.looks_like_follow_up

    def counting(question: str) -> bool:
        asked[question] += 1
        return decide(question)

    monkeypatch.setattr(follow_ups, "looks_like_follow_up", counting)
    # Embedded, so that the question before is embedded with it: the path that asked twice.
    engine = RetrievalEngine(embedded(), Fixed())
    history = [Exchange("How do I use a proxy server?", "According to proxies.md: ...", ("proxies.md",))]
    await engine.answer("And is it a URL?", history)
    assert asked["And is it a URL?"] == 1


def test_each_field_is_scored_once_per_hybrid_question(monkeypatch: pytest.MonkeyPatch) -> None:
    index = embedded()
    scored: list[int] = []
    bm25 = lexical._bm25

    def counting(field: Any, size: int, query: Any) -> Any:
        scored.append(id(field))
        return bm25(field, size, query)

    monkeypatch.setattr(lexical, "_bm25", counting)
    ranker = Ranker(index, "hybrid")
    assert ranker.mode == "hybrid"
    ranked, signals = ranker.rank(read_question("proxy server URL"), 5, Fixed().embed(["q"], query=True))
    assert ranked and signals.similarity is not None
    assert sorted(scored) == sorted({id(index.body), id(index.heading), id(index.whole)})


def test_nothing_outside_the_room_reads_the_postings_of_an_index() -> None:
    reads = re.compile(r"\.(?:body|heading|whole|holders)\.(?:postings|holders|holds|idf)\(")
    found = [
        path.relative_to(APP).as_posix()
        for path in APP.rglob("*.py")
        if reads.search(path.read_text()) and ROOM not in path.parents and "knowledge" not in path.parts
    ]
    assert found == []
    assert {p.name for p in ROOM.glob("*.py") if reads.search(p.read_text())} == {"lexical.py"}


async def test_an_engine_answers_from_the_index_swapped_in_since_the_last_call() -> None:
    engine = RetrievalEngine(PassageIndex.from_passages(PASSAGES[:1]))
    assert (await engine.search("connection tried again", 3)) == []
    engine.served.swap(PassageIndex.from_passages(PASSAGES))
    assert [p.source for p in await engine.search("connection tried again", 3)] == ["retries.md"]
