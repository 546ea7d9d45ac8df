"""The `openai` and `azure-openai` embedders: an embeddings endpoint, through the official SDK.

`openai` is any OpenAI-compatible `/embeddings` endpoint (OpenAI, a local server, a gateway);
`azure-openai` is an Azure OpenAI embeddings deployment, signed in with Entra ID (the managed
identity in Azure, developer credentials locally) unless given a key, as the chat engine is.
Vectors are asked for as base64 (the SDK's default: a quarter of the bytes of JSON numbers),
normalised to length 1 here whatever the model returns, and checked to have one length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from app.domain.ports import Vectors
from app.engines.openai_client import Wording, failure
from app.errors import EngineFailed

if TYPE_CHECKING:
    from openai import OpenAI


class RemoteEmbedder:
    """An embeddings endpoint behind an `openai.OpenAI` (or `AzureOpenAI`) client with retries off."""

    def __init__(
        self,
        name: str,
        client: OpenAI,
        model: str,
        *,
        dimensions: int | None = None,
        batch_size: int = 32,
        input_type: bool = False,
        extra_headers: dict[str, Any] | None = None,
        close: Callable[[], None] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.name = name
        self.batch_size = batch_size
        self._client = client
        self._model = model
        self._dimensions = dimensions
        self._input_type = input_type
        self._extra_headers = extra_headers
        self._close = close
        #: The client's bound on each call, named when one is exceeded.
        self._timeout = timeout

    def embed(self, texts: Sequence[str], *, query: bool) -> Vectors:
        import openai

        if not texts:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        extra_body = {"input_type": "query" if query else "passage"} if self._input_type else None
        try:
            reply = self._client.embeddings.create(
                model=self._model,
                input=list(texts),
                dimensions=self._dimensions if self._dimensions is not None else openai.omit,
                extra_body=extra_body,
                extra_headers=self._extra_headers,
            )
        except openai.OpenAIError as error:
            raise failure(error, WORDING, self._timeout) from error
        rows = sorted(reply.data, key=lambda item: item.index)
        if len(rows) != len(texts):
            raise EngineFailed(
                f"The embeddings endpoint returned {len(rows)} vectors for {len(texts)} texts; "
                "check ANVIL_EMBEDDINGS_MODEL."
            )
        lengths = {len(row.embedding) for row in rows}
        if len(lengths) != 1 or 0 in lengths:
            raise EngineFailed("The embeddings endpoint returned vectors of different lengths.")
        if self._dimensions is not None and lengths != {self._dimensions}:
            raise EngineFailed(
                f"The embeddings endpoint returned vectors of {lengths.pop()} dimensions for "
                f"ANVIL_EMBEDDINGS_DIMENSIONS={self._dimensions}: the model cannot shorten its "
                "vectors; unset the setting."
            )
        found = np.array([row.embedding for row in rows], dtype=np.float32)
        norms = np.linalg.norm(found, axis=1, keepdims=True)
        if not np.all(np.isfinite(found)) or not np.all(norms > 0):
            raise EngineFailed("The embeddings endpoint returned a vector that is not a direction.")
        unit: Vectors = found / norms
        return unit

    def close(self) -> None:
        self._client.close()
        if self._close is not None:
            self._close()


#: How the endpoint's errors read.
WORDING = Wording(
    "The embeddings endpoint",
    credentials="the embedder's key or role assignment",
    unknown_model="check ANVIL_EMBEDDINGS_MODEL or ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT",
)
