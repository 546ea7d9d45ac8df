"""Corpus folders of a test's making, and what reading them or serving them gives."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import pytest

from app.knowledge.corpus_files import read_corpus
from support.anvil_server import AnvilServer


def make_corpus(tmp_path: Path) -> Path:
    """A corpus folder of two documents, one in a sub-folder."""
    folder = tmp_path / "corpus"
    (folder / "guide").mkdir(parents=True)
    (folder / "guide" / "install.md").write_text("# Install\nRun the installer.\n", encoding="utf-8")
    (folder / "index.md").write_text("# Index\nStart here.\n", encoding="utf-8")
    return folder


#: How many sections (and passages) `bays_corpus` writes unless told.
BAYS = 10


def bays_corpus(tmp_path: Path, sections: int = BAYS, first: str = "its own tide table") -> Path:
    """A corpus of one page of `sections` sections, a passage each ("Bay N has its own tide
    table", bay 0 what `first` says); written again over the same folder when called again."""
    folder = tmp_path / "bays"
    folder.mkdir(exist_ok=True)
    said = [first, *["its own tide table"] * (sections - 1)]
    text = "".join(f"## Bay {n}\n\nBay {n} has {what}.\n\n" for n, what in enumerate(said))
    (folder / "bays.md").write_text(f"# Bays\n\n{text}", encoding="utf-8")
    return folder


def make_outside(tmp_path: Path) -> Path:
    """A folder beside the corpus holding a secret document."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.md").write_text("# Secret\nThe launch code is 0000.\n", encoding="utf-8")
    return folder


def sources(folder: Path) -> list[str]:
    return [file.source for file in read_corpus(folder)]


def skipped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "skipped" in r.message]


def headers(server: AnvilServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token('reader')}"}


def fetch(server: AnvilServer, source: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/fetch", params={"source": source}, headers=headers(server))


def search(server: AnvilServer, text: str) -> list[str]:
    found = httpx.get(f"{server.url}/api/search", params={"searchText": text}, headers=headers(server))
    assert found.status_code == 200, found.text
    return [hit["source"] for hit in found.json()["results"]]


def warnings(server: AnvilServer) -> list[str]:
    logged = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    return [line["message"] for line in logged if line["level"] == "WARNING"]
