"""An index built into Blob Storage with vectors, against Azurite and the real SDK: a rebuild
reuses the vectors of the index it replaces, and a build whose embedder fails half way keeps
what it embedded beside the blob, so that the next one embeds only the rest."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
from support.azurite import Azurite
from support.corpus_files import BAYS, bays_corpus
from support.embedders import Counting, Failing

from app.blob_urls import BlobStorageError
from app.errors import EngineFailed
from app.knowledge.blob import CONNECTION_STRING, blob_version, download_if_present
from app.knowledge.blob_build import build_to_blob, partial_url
from app.knowledge.build import Source, build
from app.knowledge.index import PassageIndex


@pytest.fixture
def emulator(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Azurite:
    monkeypatch.setenv(CONNECTION_STRING, azurite.connection_string())
    return azurite


def served(url: str, tmp_path: Path) -> PassageIndex:
    copy = tmp_path / f"{uuid.uuid4().hex}.anvilidx"
    assert download_if_present(url, copy)
    return PassageIndex.open(copy)


def test_a_rebuild_into_a_blob_embeds_only_what_changed(emulator: Azurite, tmp_path: Path) -> None:
    url = emulator.url("indexes", f"{uuid.uuid4().hex}/docs.anvilidx")
    first = Counting()
    built = build_to_blob([Source(bays_corpus(tmp_path))], url, embedder=first)
    assert built.embedded == len(first.passages) == BAYS

    again = Counting()
    rebuilt = build_to_blob([Source(bays_corpus(tmp_path, first="two tide tables"))], url, embedder=again)

    assert rebuilt.embedded == 1 and again.passages == ["Bays > Bay 0\n\nBay 0 has two tide tables."]
    index = served(url, tmp_path)
    assert index.vectors is not None and len(index.vectors) == BAYS


def test_a_build_into_a_blob_that_fails_half_way_is_resumed_by_the_next(
    emulator: Azurite, tmp_path: Path
) -> None:
    url = emulator.url("indexes", f"{uuid.uuid4().hex}/docs.anvilidx")
    with pytest.raises(EngineFailed):
        build_to_blob([Source(bays_corpus(tmp_path))], url, embedder=Failing(batches=2))
    assert blob_version(url) is None
    assert partial_url(url).endswith("/docs.partial") and blob_version(partial_url(url)) is not None

    again = Counting()
    built = build_to_blob([Source(bays_corpus(tmp_path))], url, embedder=again)

    assert built.embedded == len(again.passages) == BAYS - 4
    assert blob_version(partial_url(url)) is None
    index = served(url, tmp_path)
    whole = Counting()
    build([Source(bays_corpus(tmp_path))], tmp_path / "whole.anvilidx", embedder=whole)
    assert index.vectors is not None
    assert np.array_equal(index.vectors, PassageIndex.open(tmp_path / "whole.anvilidx").vectors)


def test_a_partial_that_cannot_be_deleted_leaves_the_index_uploaded(
    emulator: Azurite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url = emulator.url("indexes", f"{uuid.uuid4().hex}/docs.anvilidx")
    with pytest.raises(EngineFailed):
        build_to_blob([Source(bays_corpus(tmp_path))], url, embedder=Failing(batches=1))

    def refused(at: str) -> bool:
        raise BlobStorageError(f"cannot use {at}: this identity may not delete blobs")

    monkeypatch.setattr("app.knowledge.blob_build.delete_if_present", refused)
    built = build_to_blob([Source(bays_corpus(tmp_path))], url, embedder=Counting())

    assert built.embedded == BAYS - 2 and blob_version(url) is not None
    assert blob_version(partial_url(url)) is not None
    assert "is left beside the index: cannot use" in caplog.text
