"""Refresh a documentation folder's vector seed (default: docs/), which a first start over the
folder and `anvil index` reuse for every passage whose text is unchanged.

    .venv/bin/python bench/docs_vectors.py [FOLDER]

The folder's passages are embedded with the `local` embedder, reusing the seed already there, so
only what changed since it was written is embedded; the seed is then written again with the
vectors of the passages the folder holds now, and no others. Run it after editing the docs and
commit `docs/.anvil-vectors` with them: a fresh clone's quick start then ranks by meaning within
seconds instead of embedding every passage.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engines.embeddings.local import LocalEmbedder
from app.knowledge.corpus_cache import open_cached
from app.knowledge.vectors import SEED, reusable, seed_vectors, write_vectors


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", nargs="?", type=Path, default=Path(__file__).resolve().parents[1] / "docs")
    args = parser.parse_args()
    embedder = LocalEmbedder()
    before = seed_vectors(args.folder)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="anvil-seed-") as scratch:
        index, pending = open_cached(args.folder, Path(scratch), embedder=embedder)
        missing = 0 if pending is None else pending.missing
        if pending is not None:
            index = pending.run()
        vectors = reusable(index.embedder, index.vectors, index.vector_keys)
        index.close()
    write_vectors(args.folder / SEED, embedder.name, vectors, mode=0o644)
    kept = len(set(vectors) & set(before))
    print(
        f"{args.folder / SEED}: {len(vectors)} passages ({kept} reused, {missing} embedded, "
        f"{len(before) - kept} dropped) in {time.monotonic() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
