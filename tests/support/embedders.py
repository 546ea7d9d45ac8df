"""Stand-ins for an embedding model, for building indexes with vectors in tests."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from app.errors import EngineFailed


class Counting:
    """A deterministic stand-in for a model: a unit vector drawn from each text's hash; counts
    the passages it is asked to embed."""

    batch_size = 2

    def __init__(self, name: str = "test:counting") -> None:
        self.name = name
        self.passages: list[str] = []

    def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        if not query:
            self.passages.extend(texts)
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            row = np.random.default_rng(seed).normal(size=8)
            rows.append(row / np.linalg.norm(row))
        return np.array(rows, dtype=np.float32)

    def close(self) -> None:
        pass


class Failing(Counting):
    """Embeds `batches` batches of passages, then its endpoint goes down."""

    def __init__(self, batches: int) -> None:
        super().__init__()
        self.batches = batches

    def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        if not query:
            if self.batches == 0:
                raise EngineFailed("Anvil could not reach the embeddings endpoint; ask again in a moment.")
            self.batches -= 1
        return super().embed(texts, query=query)
