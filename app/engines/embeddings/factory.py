"""`open_embedder`: the embedder the settings name, or None for `ANVIL_EMBEDDINGS=none`."""

from __future__ import annotations

from app.domain.ports import Embedder
from app.engines.openai_client import OpenAIEndpoint
from app.settings.embeddings import EmbeddingSettings
from app.settings.engines import EngineSettings

#: Longest wait for one embeddings call (a batch of passages, or a question).
TIMEOUT_SECONDS = 60.0


def open_embedder(settings: EmbeddingSettings, engine: EngineSettings) -> Embedder | None:
    """The configured embedder. `openai` falls back on the chat engine's base URL and key;
    `azure-openai` on its endpoint, API version and key (else Entra ID)."""
    if settings.embeddings == "none":
        return None
    if settings.embeddings == "local":
        from app.engines.embeddings.local import LocalEmbedder

        return LocalEmbedder(settings.embeddings_model, batch_size=settings.embeddings_batch_size)
    from app.engines.embeddings.remote import RemoteEmbedder

    dimensions = settings.embeddings_dimensions
    suffix = "" if dimensions is None else f"@{dimensions}"
    if settings.embeddings == "azure-openai":
        deployment = settings.azure_openai_embedding_deployment
        if deployment is None or engine.azure_openai_endpoint is None:
            raise ValueError(
                "ANVIL_EMBEDDINGS=azure-openai needs ANVIL_AZURE_OPENAI_ENDPOINT and "
                "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT"
            )
        azure_key = engine.azure_openai_api_key
        endpoint = OpenAIEndpoint(
            TIMEOUT_SECONDS,
            key=None if azure_key is None else azure_key.get_secret_value(),
            azure_endpoint=engine.azure_openai_endpoint,
            api_version=engine.azure_openai_api_version,
        )
        name, model, input_type = f"azure-openai:{deployment}{suffix}", deployment, False
    else:
        assert settings.embeddings_model is not None  # required by the settings for this embedder
        secret = settings.embeddings_api_key or engine.openai_api_key
        endpoint = OpenAIEndpoint(
            TIMEOUT_SECONDS,
            base_url=settings.embeddings_base_url or engine.openai_base_url,
            key=(secret.get_secret_value() if secret is not None else None) or None,
        )
        name, model = f"openai:{settings.embeddings_model}{suffix}", settings.embeddings_model
        input_type = settings.embeddings_input_type
    client, close = endpoint.client()
    return RemoteEmbedder(
        name,
        client,
        model,
        dimensions=dimensions,
        batch_size=settings.embeddings_batch_size,
        input_type=input_type,
        extra_headers=endpoint.extra_headers,
        close=close,
        timeout=endpoint.timeout,
    )
