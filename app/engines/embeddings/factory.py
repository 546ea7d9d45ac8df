"""`open_embedder`: the embedder the settings name, or None for `ANVIL_EMBEDDINGS=none`."""

from __future__ import annotations

from typing import Any

from app.domain.ports import Embedder
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
    import openai

    from app.engines.embeddings.remote import RemoteEmbedder

    client: openai.OpenAI
    common: dict[str, Any] = {"max_retries": 0, "timeout": TIMEOUT_SECONDS}
    dimensions = settings.embeddings_dimensions
    suffix = "" if dimensions is None else f"@{dimensions}"
    if settings.embeddings == "azure-openai":
        deployment = settings.azure_openai_embedding_deployment
        endpoint = engine.azure_openai_endpoint
        if deployment is None or endpoint is None:
            raise ValueError(
                "ANVIL_EMBEDDINGS=azure-openai needs ANVIL_AZURE_OPENAI_ENDPOINT and "
                "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT"
            )
        close = None
        if engine.azure_openai_api_key is not None:
            client = openai.AzureOpenAI(
                azure_endpoint=endpoint,
                api_version=engine.azure_openai_api_version,
                api_key=engine.azure_openai_api_key.get_secret_value(),
                **common,
            )
        else:
            from azure.identity import DefaultAzureCredential, get_bearer_token_provider

            credential = DefaultAzureCredential()
            close = credential.close
            client = openai.AzureOpenAI(
                azure_endpoint=endpoint,
                api_version=engine.azure_openai_api_version,
                azure_ad_token_provider=get_bearer_token_provider(
                    credential, "https://cognitiveservices.azure.com/.default"
                ),
                **common,
            )
        return RemoteEmbedder(
            f"azure-openai:{deployment}{suffix}",
            client,
            deployment,
            dimensions=dimensions,
            batch_size=settings.embeddings_batch_size,
            close=close,
        )
    assert settings.embeddings_model is not None  # required by the settings for this embedder
    secret = settings.embeddings_api_key or engine.openai_api_key
    key = (secret.get_secret_value() if secret is not None else None) or None
    client = openai.OpenAI(
        base_url=settings.embeddings_base_url or engine.openai_base_url, api_key=key or "unused", **common
    )
    return RemoteEmbedder(
        f"openai:{settings.embeddings_model}{suffix}",
        client,
        settings.embeddings_model,
        dimensions=dimensions,
        batch_size=settings.embeddings_batch_size,
        input_type=settings.embeddings_input_type,
        # An endpoint without keys: send no Authorization header rather than a made-up one.
        extra_headers={"Authorization": openai.omit} if key is None else None,
    )
