"""In-process costs: the retrieval index (bundled docs and a generated 10,000-passage corpus) and
token verification with the cache hit vs missed.

    .venv/bin/python bench/micro.py
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app.adapters.engines.retrieval import RetrievalEngine
from app.auth.dev import DevIssuer
from app.knowledge.corpus import CorpusPassage

ROOT = Path(__file__).resolve().parent.parent
WORDS = [
    "conversation",
    "store",
    "cosmos",
    "sqlite",
    "token",
    "entra",
    "tenant",
    "scope",
    "answer",
    "question",
    "history",
    "turn",
    "expiry",
    "partition",
    "request",
    "unit",
    "retry",
    "throttle",
    "replica",
    "container",
    "index",
    "passage",
    "heading",
    "corpus",
    "engine",
    "protocol",
    "session",
    "header",
    "origin",
    "host",
    "metadata",
    "resource",
    "client",
    "server",
    "deploy",
    "terraform",
    "image",
]
QUERIES = [
    "How long does a conversation live?",
    "What is the partition key?",
    "How do I sign in from VS Code?",
]


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def generated_corpus(count: int) -> list[CorpusPassage]:
    rng = random.Random(7)
    return [
        CorpusPassage(f"gen/{i // 100}.md", f"Section {i}", " ".join(rng.choices(WORDS, k=60)) + ".")
        for i in range(count)
    ]


def retrieval() -> None:
    build = timed(lambda: RetrievalEngine.build(ROOT / "docs"), 5)
    engine = RetrievalEngine.build(ROOT / "docs")
    query = timed(lambda: asyncio.run(engine.search(QUERIES[0], 5)), 50)
    answer = timed(lambda: asyncio.run(engine.answer(QUERIES[1], ())), 50)
    print(
        f"bundled docs: {engine.passage_count} passages, index build {build * 1e3:.1f} ms, "
        f"search {query * 1e3:.2f} ms, answer {answer * 1e3:.2f} ms"
    )
    passages = generated_corpus(10_000)
    build = timed(lambda: RetrievalEngine.from_passages(passages), 3)
    big = RetrievalEngine.from_passages(passages)
    query = timed(lambda: asyncio.run(big.search(QUERIES[0], 5)), 20)
    answer = timed(lambda: asyncio.run(big.answer(QUERIES[2], ())), 20)
    print(
        f"generated corpus: {big.passage_count} passages, index build {build * 1e3:.0f} ms, "
        f"search {query * 1e3:.2f} ms, answer {answer * 1e3:.2f} ms"
    )


def verification() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        issuer = DevIssuer.load_or_create(Path(scratch))
        tokens = [issuer.mint(f"user{i}") for i in range(2000)]

        async def measure() -> tuple[float, float]:
            cold = issuer.verifier()
            started = time.perf_counter()
            for token in tokens:
                await cold.verify(token)
            miss = (time.perf_counter() - started) / len(tokens)
            started = time.perf_counter()
            for _ in range(5):
                for token in tokens:
                    await cold.verify(token)
            hit = (time.perf_counter() - started) / (5 * len(tokens))
            return miss, hit

        miss, hit = asyncio.run(measure())
    print(
        f"token verification: cache miss {miss * 1e6:.0f} µs, cache hit {hit * 1e6:.1f} µs "
        f"({miss / hit:.0f}x), token {len(tokens[0])} bytes"
    )


if __name__ == "__main__":
    retrieval()
    verification()
