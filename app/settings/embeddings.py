"""The embedder of passages and questions, for ranking by meaning as well as by words
(`EmbeddingSettings`)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator

from app.settings.base import Part
from app.urls import checked_url

#: The models the `local` embedder ships with.
LOCAL_MODELS = ("multilingual-e5-small-q4", "portuguese-multilingual-e5-small-q4")


class EmbeddingSettings(Part):
    """Which embedder turns passages (when an index is built) and questions (when they are asked)
    into vectors, and the endpoint of `openai` and `azure-openai`."""

    embeddings: Literal["none", "local", "openai", "azure-openai"] = Field(
        "local",
        description=(
            "`local`: a small multilingual model run in process, offline (multilingual-e5-small, "
            "4-bit); `openai`: any OpenAI-compatible `/embeddings` endpoint; `azure-openai`: an "
            "Azure OpenAI embeddings deployment; `none`: rank by words alone. An index is served "
            "only with the embedder it was built with."
        ),
    )
    embeddings_model: str | None = Field(
        None,
        description=(
            "The embeddings model: for `local`, `multilingual-e5-small-q4` (default) or "
            "`portuguese-multilingual-e5-small-q4`; for `openai`, the model name (required)."
        ),
    )
    embeddings_base_url: str | None = Field(
        None,
        description=(
            "`openai` embedder: the endpoint's base URL, e.g. `http://localhost:8080/v1`. "
            "Default: `ANVIL_OPENAI_BASE_URL`, else OpenAI's."
        ),
    )
    embeddings_api_key: SecretStr | None = Field(
        None,
        description=(
            "`openai` embedder: the API key. Default: `ANVIL_OPENAI_API_KEY`; omit both for "
            "endpoints that need none."
        ),
    )
    embeddings_dimensions: int | None = Field(
        None,
        ge=16,
        le=8192,
        description=(
            "How many dimensions to ask the model for, where it can shorten its vectors "
            "(text-embedding-3-*); default: the model's own."
        ),
    )
    embeddings_batch_size: int = Field(
        32, ge=1, le=2048, description="Passages sent to the embedder in one call as an index is built."
    )
    embeddings_input_type: bool = Field(
        False,
        description=(
            "`openai` embedder: send `input_type` (`query` or `passage`) with each request, for "
            "servers of models that embed questions and passages differently (E5-style)."
        ),
    )
    azure_openai_embedding_deployment: str | None = Field(
        None, description="`azure-openai` embedder: the embeddings deployment's name (required)."
    )

    @field_validator("embeddings_base_url")
    @classmethod
    def _embeddings_endpoint(cls, value: str | None) -> str | None:
        return None if value is None else checked_url(value, example="http://localhost:8080/v1")

    @model_validator(mode="after")
    def _embedder_has_a_model(self) -> Self:
        if self.embeddings == "local" and self.embeddings_model not in (None, *LOCAL_MODELS):
            raise ValueError(
                f"ANVIL_EMBEDDINGS=local runs {' or '.join(LOCAL_MODELS)}, not "
                f"{self.embeddings_model!r}: unset ANVIL_EMBEDDINGS_MODEL, or use ANVIL_EMBEDDINGS=openai "
                "with a server of that model"
            )
        if self.embeddings == "local" and self.embeddings_dimensions is not None:
            raise ValueError(
                "ANVIL_EMBEDDINGS=local vectors have the model's own 384 dimensions: unset "
                "ANVIL_EMBEDDINGS_DIMENSIONS"
            )
        if self.embeddings == "openai" and not self.embeddings_model:
            raise ValueError("ANVIL_EMBEDDINGS=openai needs ANVIL_EMBEDDINGS_MODEL (the model to call)")
        if self.embeddings == "azure-openai" and not self.azure_openai_embedding_deployment:
            raise ValueError(
                "ANVIL_EMBEDDINGS=azure-openai needs ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT "
                "(and ANVIL_AZURE_OPENAI_ENDPOINT)"
            )
        return self
