"""An index file whose `built.at` said a 13th month passed every check (`built` is outside the
version's hash), was swapped in by the refresh (or served from the start), and from then on every
`/readyz` answered 500 (a `ValueError` reading its age). Found by a hostile run on 0.5.0; fixed
in 0.6.0: every field the server reads of an index is checked when it is opened, so such a file is
refused naming the field: start-up stops saying so, and a refresh keeps serving the old index."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from support.anvil_server import anvil_run, free_port, run_anvil

from app.knowledge.artifact import write_index
from app.knowledge.corpus import CorpusFile
from app.knowledge.sections import build_arrays

MONTH_13 = "2026-13-01T00:00:00Z"


def index_file(path: Path, text: str, at: str) -> str:
    """An index of one page saying `text`, built (it says) at `at`; its version."""
    arrays, content = build_arrays([CorpusFile("page.md", "Page", f"# Page\n\n{text}\n")])
    return write_index(path, arrays, content, {"at": at, "from": ["docs"]})


def test_a_new_version_built_in_a_13th_month_is_refused_and_readyz_stays_200(tmp_path: Path) -> None:
    path = tmp_path / "docs.anvilidx"
    served = index_file(path, "The tide turns twice a day.", "2026-05-04T03:02:01Z")
    env = {"ANVIL_INDEX": str(path), "ANVIL_INDEX_REFRESH_SECONDS": "0.1"}
    with run_anvil(tmp_path / "data", env) as server:
        index_file(path, "Monsoon winds turn with the seasons.", MONTH_13)
        deadline = time.monotonic() + 30
        while "kept serving version" not in server.log():  # polled: the server looks every 0.1 s
            ready = httpx.get(f"{server.url}/readyz", timeout=10)
            assert ready.status_code == 200, ready.text
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        ready = httpx.get(f"{server.url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["index"]["version"] == served
        assert f"index: kept serving version {served}: {path} cannot be served: built.at is '{MONTH_13}'" in (
            server.log()
        )


def test_a_server_started_on_an_index_built_in_a_13th_month_stops_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "docs.anvilidx"
    index_file(path, "The tide turns twice a day.", MONTH_13)
    ran = anvil_run(
        "serve",
        ANVIL_INDEX=str(path),
        ANVIL_DATA_DIR=str(tmp_path / "data"),
        ANVIL_PORT=str(free_port()),
        timeout=60,
    )
    said = ran.stdout + ran.stderr
    assert ran.returncode == 3 and "Traceback" not in said
    assert f"Anvil cannot start: ANVIL_INDEX: {path} cannot be served: built.at is '{MONTH_13}'" in said
