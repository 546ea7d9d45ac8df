"""`anvil index` builds a knowledge index once, and `anvil serve` serves it (ANVIL_INDEX) with the
same answers as when it indexes the folder itself; an index it cannot serve stops start-up with
one line saying why."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
from support.anvil_server import AnvilServer, free_port, run_anvil
from support.preloaded_anvil import preloaded_anvil_command

DOCS = Path(__file__).resolve().parents[2] / "docs"


def anvil(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")} | env
    return subprocess.run(
        [*preloaded_anvil_command(), *args],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def asked(server: AnvilServer, question: str) -> dict[str, object]:
    response = httpx.post(
        f"{server.url}/api/ask",
        json={"question": question},
        headers={"Authorization": f"Bearer {server.token('reader')}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def test_a_built_index_is_served_with_the_answers_of_the_folder_it_was_built_from(tmp_path: Path) -> None:
    target = tmp_path / "out" / "docs.anvilidx"
    ran = anvil("index", str(DOCS), "--output", str(target))
    assert ran.returncode == 0, ran.stderr
    (line,) = ran.stderr.splitlines()
    assert line.startswith("anvil: indexed ") and f"into {target}: version " in line
    assert ran.stdout == ""
    questions = ("How long does a conversation live?", "How do I register Anvil in API Management?")
    with run_anvil(tmp_path / "a", {"ANVIL_INDEX": str(target)}) as served:
        from_index = [asked(served, q) for q in questions]
    with run_anvil(tmp_path / "b", {"ANVIL_CORPUS_DIR": str(DOCS)}) as built:
        from_folder = [asked(built, q) for q in questions]
    assert from_index == from_folder
    assert all(answer["sources"] for answer in from_index)
    # The folder's own index is kept in its data folder, for the next start.
    assert [p.suffix for p in (tmp_path / "b" / "index-cache").iterdir()] == [".anvilidx"]


def test_sources_and_targets_the_command_cannot_use_are_refused_with_what_to_give(tmp_path: Path) -> None:
    for args, said in (
        ([str(tmp_path / "missing"), "--output", str(tmp_path / "i")], "is not a folder of documents"),
        (["https://acct.blob.core.windows.net/docs/", "--output", str(tmp_path / "i")], "is a URL"),
        ([str(DOCS), "--output", str(tmp_path)], "is a folder: name the index file to write"),
    ):
        ran = anvil("index", *args)
        assert ran.returncode == 2 and said in ran.stderr, ran.stderr
    assert not (tmp_path / "i").exists()


def test_an_index_that_cannot_be_served_stops_start_up_with_one_line(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.anvilidx"
    assert anvil("index", str(DOCS), "--output", str(damaged)).returncode == 0
    damaged.write_bytes(damaged.read_bytes()[:-10])
    for index, said in (
        (damaged, f"ANVIL_INDEX: {damaged} is truncated or damaged"),
        (tmp_path / "none.anvilidx", f"ANVIL_INDEX: cannot open {tmp_path / 'none.anvilidx'}: No such file"),
    ):
        ran = anvil(
            "serve",
            ANVIL_DATA_DIR=str(tmp_path / "data"),
            ANVIL_PORT=str(free_port()),
            ANVIL_INDEX=str(index),
        )
        assert ran.returncode != 0
        output = ran.stdout + ran.stderr
        assert "Traceback" not in output
        (reason,) = [
            json.loads(line)["message"]
            for line in output.splitlines()
            if line.strip() and "Anvil cannot start" in line
        ]
        assert said in reason, reason
