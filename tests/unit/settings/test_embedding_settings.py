"""The embedder's settings: defaults, the checks of `EmbeddingSettings` alone and within
`Settings`, and the check spanning parts (an `azure-openai` embedder needs the resource)."""

from __future__ import annotations

import os
import re

import pytest
from pydantic import ValidationError

from app.settings import Settings, describe_error
from app.settings.embeddings import LOCAL_MODELS, EmbeddingSettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without ANVIL_ variables, whatever the shell running the tests set."""
    for name in list(os.environ):
        if name.upper().startswith("ANVIL_"):
            monkeypatch.delenv(name)


def refusal(**values: object) -> ValidationError:
    with pytest.raises(ValidationError) as refused:
        Settings(**values)  # type: ignore[arg-type]
    return refused.value


# --- defaults and the environment ---------------------------------------------------------------


def test_the_default_embedder_is_local() -> None:
    part = EmbeddingSettings()

    assert part.embeddings == "local"
    assert part.embeddings_model is None
    assert part.embeddings_base_url is None
    assert part.embeddings_api_key is None
    assert part.embeddings_dimensions is None
    assert part.embeddings_batch_size == 32
    assert part.embeddings_input_type is False
    assert part.azure_openai_embedding_deployment is None
    assert Settings().embeddings == "local"


def test_the_embedder_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_EMBEDDINGS", "openai")
    monkeypatch.setenv("ANVIL_EMBEDDINGS_MODEL", "text-embedding-3-small")
    monkeypatch.setenv("ANVIL_EMBEDDINGS_BASE_URL", "http://localhost:8080/v1/")
    monkeypatch.setenv("ANVIL_EMBEDDINGS_API_KEY", "embed-key")
    monkeypatch.setenv("ANVIL_EMBEDDINGS_DIMENSIONS", "256")
    monkeypatch.setenv("ANVIL_EMBEDDINGS_BATCH_SIZE", "64")
    monkeypatch.setenv("ANVIL_EMBEDDINGS_INPUT_TYPE", "true")

    settings = Settings()

    assert settings.embeddings == "openai"
    assert settings.embeddings_model == "text-embedding-3-small"
    assert settings.embeddings_base_url == "http://localhost:8080/v1"  # without the trailing slash
    assert settings.embeddings_api_key is not None
    assert settings.embeddings_api_key.get_secret_value() == "embed-key"
    assert "embed-key" not in repr(settings)
    assert settings.embeddings_dimensions == 256
    assert settings.embeddings_batch_size == 64
    assert settings.embeddings_input_type is True


def test_keyword_arguments_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_EMBEDDINGS", "none")
    assert Settings().embeddings == "none"
    assert Settings(embeddings="local").embeddings == "local"


@pytest.mark.parametrize("model", LOCAL_MODELS)
def test_local_takes_either_of_its_models(model: str) -> None:
    assert EmbeddingSettings(embeddings="local", embeddings_model=model).embeddings_model == model


def test_an_openai_embedder_with_its_model_is_accepted() -> None:
    part = EmbeddingSettings(
        embeddings="openai", embeddings_model="text-embedding-3-small", embeddings_dimensions=512
    )
    assert part.embeddings_dimensions == 512


def test_an_azure_openai_embedder_with_deployment_and_endpoint_is_accepted() -> None:
    settings = Settings(
        embeddings="azure-openai",
        azure_openai_embedding_deployment="embed-small",
        azure_openai_endpoint="https://example.openai.azure.com",
    )
    assert settings.azure_openai_embedding_deployment == "embed-small"


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"embeddings": "local", "embeddings_model": "text-embedding-3-small"}, "text-embedding-3-small"),
        ({"embeddings": "local", "embeddings_dimensions": 256}, "ANVIL_EMBEDDINGS_DIMENSIONS"),
        ({"embeddings": "openai"}, "ANVIL_EMBEDDINGS_MODEL"),
        ({"embeddings": "openai", "embeddings_model": ""}, "ANVIL_EMBEDDINGS_MODEL"),
        ({"embeddings": "azure-openai"}, "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT"),
        ({"embeddings": "openai", "embeddings_model": "m", "embeddings_base_url": "ftp://x"}, "http(s)"),
    ],
)
def test_the_part_makes_its_checks_alone_and_within_settings(values: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(named)):
        EmbeddingSettings(**values)  # type: ignore[arg-type]
    line = describe_error(refusal(**values))
    assert named in line
    assert "\n" not in line


def test_local_with_an_unknown_model_names_the_two_local_models() -> None:
    with pytest.raises(ValueError, match="ANVIL_EMBEDDINGS=local") as refused:
        EmbeddingSettings(embeddings="local", embeddings_model="multilingual-e5-large")

    message = str(refused.value)
    assert "multilingual-e5-large" in message
    assert "multilingual-e5-small-q4" in message
    assert "portuguese-multilingual-e5-small-q4" in message


def test_azure_openai_embeddings_without_an_endpoint_are_refused() -> None:
    assert EmbeddingSettings(
        embeddings="azure-openai", azure_openai_embedding_deployment="x"
    )  # the part alone
    line = describe_error(refusal(embeddings="azure-openai", azure_openai_embedding_deployment="x"))

    assert "ANVIL_AZURE_OPENAI_ENDPOINT" in line
    assert "ANVIL_EMBEDDINGS=azure-openai" in line


@pytest.mark.parametrize(
    "url", ["ftp://x", "localhost:8080/v1", "http://x/v1?key=1", "https://x/v1#top", "https://", "/v1"]
)
def test_a_bad_base_url_is_refused(url: str) -> None:
    line = describe_error(refusal(embeddings="openai", embeddings_model="m", embeddings_base_url=url))

    assert line.startswith("ANVIL_EMBEDDINGS_BASE_URL: ")
    assert "http(s)" in line


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("embeddings", "sentence-transformers"),
        ("embeddings_dimensions", 8),
        ("embeddings_dimensions", 9000),
        ("embeddings_batch_size", 0),
        ("embeddings_batch_size", 2049),
    ],
)
def test_out_of_range_values_are_refused(field: str, value: object) -> None:
    values: dict[str, object] = {"embeddings": "openai", "embeddings_model": "m", field: value}
    assert describe_error(refusal(**values)).startswith(f"ANVIL_{field.upper()}: ")
