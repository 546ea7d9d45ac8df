"""Fit the weights of `app.engines.retrieval.rerank` and check them on sets left out of the fit.

    .venv/bin/python bench/rerank_fit.py [--sets DIR] [--cache DIR] [--penalty 0.05]

For every single question of every set of `--sets` (those `bench/eval.py` scores), the
candidates `rerank` would reorder and their features, over the indexes `bench/eval.py` keeps
under `.anvil/eval-cache/` (or `--cache`; built and embedded by the `local` embedder the first
time). The weights are fitted listwise (the log of the probability a softmax over a question's
candidates gives the passages of the right file), with an L2 penalty, each match feature kept to
its sign (more alike, more words, nearer the top: never worse). Then, for each set in turn,
fitted on the others and scored on it: how often the right file is among the candidates at all
(the most any order of them could find), and how often the first file, and the right one among
the first three, are right with the fused score alone and with the weights (the fused ranking's
first two pages kept among the first three, as `rerank` serves them). Last, the weights fitted on
every set, as `WEIGHTS` is written; with the default `--sets`, the sets of `NEVER_FITTED` (Anvil's
own docs, and those `bench/eval_sets.sh` fetches once it has) are scored with those weights
first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.engines.embeddings.local import LocalEmbedder  # noqa: E402
from app.engines.retrieval.fusion import fuse  # noqa: E402
from app.engines.retrieval.lexical import word_scores  # noqa: E402
from app.engines.retrieval.rerank import WEIGHTS, candidates_of, features, keep_fused_pages  # noqa: E402
from app.knowledge.corpus_cache import index_folder  # noqa: E402
from app.knowledge.tokens import tokenize, words  # noqa: E402

#: Features that only ever make a passage likelier (+1) or less likely (-1); the rest are free.
SIGNS = {
    "log_lexical_rank": -1,
    "log_vector_rank": -1,
    "heading": 1,
    "body": 1,
    "file_words": 1,
    "file_similarity": 1,
    "file_lexical": 1,
    "file_among_best": 1,
    "similarity_gap": 1,
}
SETS = ROOT.parent / "shared" / "eval"
#: Checked with the weights fitted on every set of `SETS`, never fitted on, with the questions of
#: `bench/questions/NAME.json`: Anvil's own docs, which change with every commit (the weights
#: served should not), and undici's, npm's and fastify's (fetched by `bench/eval_sets.sh`), whose
#: questions were written blind to the ranking.
NEVER_FITTED = {
    "anvil": ROOT / "docs",
    **{name: ROOT / ".anvil" / "eval-sets" / f"{name}-docs" for name in ("undici", "npm", "fastify")},
}
STEPS = 3000
#: The L2 penalty. Of 0.003 to 1, 0.05 to 0.3 found the most first pages on the public sets left
#: out (76 or 77 of 88, 74 at 0.01);
#: from 0.1 on, a paraphrase on a six-page corpus (tests/unit/engines/retrieval/test_fusion.py)
#: lost its page to one sharing more of its words.
PENALTY = 0.05
RATE = 0.1

Group = tuple[np.ndarray, np.ndarray, list[str], np.ndarray]


def groups_of(corpus: Path, questions: dict[str, Any], embedder: LocalEmbedder, cache: Path) -> list[Group]:
    """Per question: candidate features, which are right, their files, and their fused scores."""
    index = index_folder(corpus, cache / corpus.resolve().name, embedder=embedder)
    assert index.vectors is not None
    found: list[Group] = []
    for item in questions.get("single", []):
        query = dict.fromkeys(tokenize(item["q"]), 1.0)
        scored = word_scores(index, query, words(item["q"]))
        similarity = (index.vectors @ embedder.embed([item["q"]], query=True)[0]).astype(np.float64)
        fused = fuse(scored.total, similarity, index)
        chosen = candidates_of(scored.total, similarity, fused)
        files = [index.passage(n).source for n in chosen.tolist()]
        right = np.array([file == item["file"] for file in files])
        rows = features(index, scored, similarity, fused, chosen)
        found.append((rows, right, files, fused[chosen]))
    return found


def fit(groups: list[Group], penalty: float) -> tuple[np.ndarray, np.ndarray]:
    """Weights over standardised features, and the standard deviations to undo it."""
    rows = np.concatenate([f for f, *_ in groups])
    mean, spread = rows.mean(0), rows.std(0) + 1e-9
    signs = np.array([SIGNS.get(name, 0) for name in WEIGHTS])
    weights = np.zeros(len(WEIGHTS))
    usable = [((f - mean) / spread, right) for f, right, *_ in groups if right.any()]
    for _ in range(STEPS):
        gradient = penalty * weights
        for z, right in usable:
            s = z @ weights
            p = np.exp(s - s.max())
            p /= p.sum()
            q = p * right / (p * right).sum()
            gradient += (p - q) @ z / len(usable)
        weights -= RATE * gradient
        weights = np.where(signs > 0, np.maximum(weights, 0), weights)
        weights = np.where(signs < 0, np.minimum(weights, 0), weights)
    return weights, spread


def hits(groups: list[Group], score: Any) -> tuple[int, int]:
    """How often the first file is right, and the right one among the first three files."""
    first = three = 0
    for f, right, files, fused in groups:
        pages = np.array([files.index(file) for file in files])
        order = keep_fused_pages(np.argsort(-score(f, fused), kind="stable"), fused, pages)
        ranked = list(dict.fromkeys(files[i] for i in order))
        want = next((files[i] for i in range(len(files)) if right[i]), None)
        first += ranked[0] == want
        three += want in ranked[:3]
    return first, three


def row(name: str, groups: list[Group], weights: np.ndarray) -> str:
    """A line of the table: how often the right file is among the candidates at all (no order of
    them can do better), and how often the fused score and the weights find it."""
    among = sum(bool(right.any()) for _, right, *_ in groups)
    base = hits(groups, lambda f, fused: fused)
    new = hits(groups, lambda f, fused: f @ weights)
    return f"| {name} | {len(groups)} | {among} | {base[0]} | {new[0]} | {base[1]} | {new[1]} |"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sets", type=Path, default=SETS, help="folder of NAME-questions.json and NAME-docs/"
    )
    parser.add_argument(
        "--cache", type=Path, default=ROOT / ".anvil" / "eval-cache", help="where indexes are kept"
    )
    parser.add_argument("--penalty", type=float, default=PENALTY)
    args = parser.parse_args()
    sets = [(q.stem.removesuffix("-questions"), q) for q in sorted(args.sets.glob("*-questions.json"))]
    if len(sets) < 2:
        parser.error(f"{args.sets} holds fewer than two NAME-questions.json with their NAME-docs/")
    embedder = LocalEmbedder()
    data = {
        name: groups_of(args.sets / f"{name}-docs", json.loads(path.read_text()), embedder, args.cache)
        for name, path in sets
    }
    print(
        "| held out | questions | among the candidates | hit@1 fused | hit@1 reranked"
        " | hit@3 fused | hit@3 reranked |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for held, groups in data.items():
        weights, spread = fit([g for name, gs in data.items() if name != held for g in gs], args.penalty)
        print(row(held, groups, weights / spread))
    weights, spread = fit([g for gs in data.values() for g in gs], args.penalty)
    if args.sets == SETS:
        for name, corpus in NEVER_FITTED.items():
            if not corpus.is_dir():
                print(f"| {name} (never fitted) | fetch it first: bench/eval_sets.sh |")
                continue
            questions = json.loads((ROOT / "bench" / "questions" / f"{name}.json").read_text())
            checked = groups_of(corpus, questions, embedder, args.cache)
            print(row(f"{name} (never fitted)", checked, weights / spread))
    print("WEIGHTS = {")
    for name, weight, unit in zip(WEIGHTS, weights, spread, strict=True):
        print(f'    "{name}": {weight:.3f} / {unit:.4f},')
    print("}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
