"""Embeddings through a real `anvil serve`: an index is served only with the embedder it was built
with, and a first start over a corpus serves at once by words, then by meaning once embedded."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
from support.anvil_server import AnvilServer, free_port, run_anvil
from support.anvil_server import anvil_run as anvil

LOCAL = "local:multilingual-e5-small-q4"


def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "tern"
    folder.mkdir()
    (folder / "hooks.md").write_text(
        "# Event hooks\n\nRegister a callable with `add_hook` and Tern calls it for every request "
        "it sends and every response it receives.\n"
    )
    (folder / "limits.md").write_text(
        "# Resource limits\n\nSet `max_connections` to cap how many sockets Tern keeps open at once.\n"
    )
    return folder


def index_lines_shown() -> list[str]:
    """The last lines of `anvil index` that the docs show, each on one line."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    found = [
        line
        for page in ("answers.md", "deployment.md")
        for line in re.findall(r"anvil: indexed .*? [\d.]+ s\b", " ".join((docs / page).read_text().split()))
    ]
    assert len(found) == 2, found
    return found


def index_line_shape(line: str) -> str:
    """`anvil index`'s last line without what varies: counts, target, version, embedder, size, time."""
    line = re.sub(r" into \S+: version \S+,", " into TARGET: version V,", line)
    line = re.sub(r"embedded by \S+,", "embedded by EMBEDDER,", line)
    return re.sub(r"\d[\d.]*", "N", line)


def start_failure(tmp_path: Path, **env: str) -> str:
    """Why `anvil serve` with `env` refused to start (its one line)."""
    ran = anvil("serve", ANVIL_DATA_DIR=str(tmp_path / "data"), ANVIL_PORT=str(free_port()), **env)
    assert ran.returncode != 0
    output = ran.stdout + ran.stderr
    assert "Traceback" not in output
    (reason,) = [
        json.loads(line)["message"]
        for line in output.splitlines()
        if line.strip() and "Anvil cannot start" in line
    ]
    return str(reason)


def test_an_index_is_refused_by_a_server_with_another_embedder(tmp_path: Path) -> None:
    folder = corpus(tmp_path)
    embedded, words = tmp_path / "embedded.anvilidx", tmp_path / "words.anvilidx"
    ran = anvil("index", str(folder), "--output", str(embedded), "--embeddings", "local")
    assert ran.returncode == 0 and f"embedded by {LOCAL}" in ran.stderr, ran.stderr
    # Its last line is the one the docs show, but for what varies.
    shown = {index_line_shape(line) for line in index_lines_shown()}
    assert shown == {index_line_shape(ran.stderr.splitlines()[-1])}
    assert anvil("index", str(folder), "--output", str(words), ANVIL_EMBEDDINGS="none").returncode == 0

    reason = start_failure(
        tmp_path,
        ANVIL_INDEX=str(embedded),
        ANVIL_EMBEDDINGS="openai",
        ANVIL_EMBEDDINGS_MODEL="text-embedding-3-small",
        ANVIL_EMBEDDINGS_BASE_URL="http://127.0.0.1:9/v1",
    )
    assert f"embedded by {LOCAL} and this server embeds with openai:text-embedding-3-small" in reason
    reason = start_failure(tmp_path, ANVIL_INDEX=str(words), ANVIL_EMBEDDINGS="local")
    assert f"built without embeddings and this server embeds with {LOCAL}" in reason

    # With the same embedder, or by words alone, each is served.
    for index, embeddings in ((embedded, "local"), (embedded, "none"), (words, "none")):
        env = {"ANVIL_INDEX": str(index), "ANVIL_EMBEDDINGS": embeddings}
        with run_anvil(tmp_path / f"ok-{index.stem}-{embeddings}", env) as server:
            status = httpx.get(f"{server.url}/readyz", timeout=10).json()["index"]
            assert status["embedder"] == (LOCAL if embeddings == "local" else None)


def embedding_status(server: AnvilServer) -> dict[str, object]:
    index: dict[str, object] = httpx.get(f"{server.url}/readyz", timeout=10).json()["index"]
    return index


def ask(server: AnvilServer, question: str) -> list[str]:
    headers = {"Authorization": f"Bearer {server.token('reader')}"}
    reply = httpx.post(f"{server.url}/api/ask", json={"question": question}, headers=headers, timeout=30)
    assert reply.status_code == 200, reply.text
    return [source["source"] for source in reply.json()["sources"]]


def test_a_first_start_embeds_in_the_background_and_the_next_one_opens_the_vectors(tmp_path: Path) -> None:
    env = {"ANVIL_CORPUS_DIR": str(corpus(tmp_path)), "ANVIL_EMBEDDINGS": "local"}
    with run_anvil(tmp_path / "data", env) as server:
        deadline = time.monotonic() + 60
        while (status := embedding_status(server))["embedded"] != status["passages"]:
            assert time.monotonic() < deadline, status  # polled: a condition, not a fixed wait
            time.sleep(0.05)
        assert status["embedder"] == LOCAL and status["version"]
        assert (
            ask(server, "How can my own function run on each outgoing call and each reply?")[0] == "hooks.md"
        )
        assert ask(server, "What is the tallest mountain in Africa?") == []
    with run_anvil(tmp_path / "data", env) as again:
        status = embedding_status(again)  # at once: nothing left to embed
        assert status["embedded"] == status["passages"] and status["embedder"] == LOCAL


def test_a_server_stopped_while_embedding_resumes_where_it_stopped(tmp_path: Path) -> None:
    folder = tmp_path / "bays"
    folder.mkdir()
    # Far more passages than are embedded in the moment between the status seen and the stop.
    sections = "".join(f"## Bay {n}\n\nBay {n} has its own tide table.\n\n" for n in range(200))
    (folder / "bays.md").write_text(f"# Bays\n\n{sections}")
    env = {"ANVIL_CORPUS_DIR": str(folder), "ANVIL_EMBEDDINGS": "local", "ANVIL_LOG_LEVEL": "info"}
    with run_anvil(tmp_path / "data", env) as server:
        deadline = time.monotonic() + 60
        while "(10 %)" not in server.log():  # the log says each tenth done
            assert time.monotonic() < deadline, server.log()  # polled: a condition, not a fixed wait
            time.sleep(0.05)
        status = embedding_status(server)
        assert int(status["passages"]) == 200 and int(status["embedded"]) >= 20  # type: ignore[call-overload]
        told = re.search(
            r"index: embedded (\d+) of 200 passages in the background \(10 %\), about \d+ s left",
            server.log(),
        )
        assert told and 20 <= int(told[1]) < 40, server.log()
    # Stopped (SIGTERM) part-way: the next start counts what was embedded before as done.
    with run_anvil(tmp_path / "data", env) as again:
        resumed = embedding_status(again)
        assert int(resumed["embedded"]) >= int(status["embedded"]), (status, resumed)  # type: ignore[call-overload]
        assert resumed["embedder"] == LOCAL
