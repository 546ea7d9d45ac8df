"""In-process costs: the retrieval index (bundled docs and a generated 10,000-passage corpus),
what each step of the hybrid ranking costs against corpus size, and token verification with the
cache hit vs missed.

    .venv/bin/python bench/micro.py [--sizes 2000,20000,150000]

The hybrid ranking runs over generated passages with seeded random unit vectors (384 numbers,
as the `local` embedder's): what ranking costs, not what it finds. Each step's median is printed
side by side with the steps before reordering, so the reordering's share of a question shows.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from app.auth.dev import DevIssuer
from app.domain.ports import Vectors
from app.engines.retrieval.engine import RetrievalEngine
from app.engines.retrieval.fusion import fuse
from app.engines.retrieval.lexical import word_scores
from app.engines.retrieval.rerank import rerank
from app.knowledge.corpus import CorpusPassage
from app.knowledge.corpus_cache import index_folder
from app.knowledge.index import PassageIndex, add_vectors
from app.knowledge.tokens import tokenize, words

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
    build = timed(lambda: index_folder(ROOT / "docs"), 5)
    engine = RetrievalEngine(index_folder(ROOT / "docs"))
    query = timed(lambda: asyncio.run(engine.search(QUERIES[0], 5)), 50)
    answer = timed(lambda: asyncio.run(engine.answer(QUERIES[1], ())), 50)
    print(
        f"bundled docs: {engine.passage_count} passages, index build {build * 1e3:.1f} ms, "
        f"search {query * 1e3:.2f} ms, answer {answer * 1e3:.2f} ms"
    )
    passages = generated_corpus(10_000)
    build = timed(lambda: PassageIndex.from_passages(passages), 3)
    big = RetrievalEngine(PassageIndex.from_passages(passages))
    query = timed(lambda: asyncio.run(big.search(QUERIES[0], 5)), 20)
    answer = timed(lambda: asyncio.run(big.answer(QUERIES[2], ())), 20)
    print(
        f"generated corpus: {big.passage_count} passages, index build {build * 1e3:.0f} ms, "
        f"search {query * 1e3:.2f} ms, answer {answer * 1e3:.2f} ms"
    )


class RandomEmbedder:
    """Seeded random unit vectors: an index's vectors for measuring ranking costs only."""

    name = "bench-random"
    batch_size = 4096

    def __init__(self, dimensions: int = 384) -> None:
        self._rng = np.random.default_rng(7)
        self._dimensions = dimensions

    def embed(self, texts: Sequence[str], *, query: bool) -> Vectors:
        drawn = self._rng.standard_normal((len(texts), self._dimensions)).astype(np.float32)
        vectors: Vectors = drawn / np.linalg.norm(drawn, axis=1, keepdims=True)
        return vectors

    def close(self) -> None:
        """Nothing is held."""


def ranking_steps(index: PassageIndex, vector: Vectors, question: str) -> list[float]:
    """Median seconds of each step of a question's hybrid ranking: words, meaning, fusion, and
    the reordering."""
    assert index.vectors is not None
    vectors = index.vectors
    query, phrase = dict.fromkeys(tokenize(question), 1.0), words(question)
    scored = word_scores(index, query, phrase)
    similarity = (vectors @ vector).astype(np.float64)
    fused = fuse(scored.total, similarity, index)
    repeat = max(5, 200_000 // index.passage_count)
    return [
        timed(lambda: word_scores(index, query, phrase), repeat),
        timed(lambda: (vectors @ vector).astype(np.float64), repeat),
        timed(lambda: fuse(scored.total, similarity, index), repeat),
        timed(lambda: rerank(index, scored, similarity, fused), repeat),
    ]


def hybrid_ranking(sizes: list[int]) -> None:
    embedder = RandomEmbedder()
    print("hybrid ranking, median ms   passages   words  meaning   fused  reordered  (reordering's share)")
    for size in sizes:
        built = PassageIndex.from_passages(generated_corpus(size))
        arrays, content = built.sections(), dict(built.content)
        add_vectors(arrays, content, embedder)
        index = PassageIndex.of_arrays(arrays, content)
        steps = ranking_steps(index, embedder.embed([QUERIES[0]], query=True)[0], QUERIES[0])
        by_words, by_meaning, fused, reordered = (step * 1e3 for step in steps)
        print(
            f"{'':27s} {size:9,d} {by_words:7.2f} {by_meaning:7.2f} {fused:7.2f} {reordered:10.2f}"
            f"  ({steps[3] / sum(steps):.0%})"
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(size) for size in text.split(",")],
        default=[2_000, 20_000, 150_000],
        help="passage counts of the hybrid ranking's generated corpora, comma-separated",
    )
    args = parser.parse_args()
    retrieval()
    hybrid_ranking(args.sizes)
    verification()


if __name__ == "__main__":
    main()
