"""`anvil index` builds a knowledge index once, and `anvil serve` serves it (ANVIL_INDEX) with the
same answers as when it indexes the folder itself; an index it cannot serve stops start-up with
one line saying why."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
from support.anvil_server import AnvilServer, free_port, run_anvil
from support.anvil_server import anvil_run as anvil

DOCS = Path(__file__).resolve().parents[2] / "docs"


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
    *stages, line = ran.stderr.splitlines()
    assert line.startswith("anvil: indexed ") and f"into {target}: version " in line
    # Not a terminal: a plain line as each stage ends, no carriage return.
    assert [stage.split(" ", 2)[1] for stage in stages] == ["read", "cut", "indexed"]
    assert "\r" not in ran.stderr
    assert ran.stdout == ""
    questions = ("How long does a conversation live?", "How do I register Anvil in API Management?")
    version = line.split("version ", 1)[1].split(",", 1)[0]
    with run_anvil(tmp_path / "a", {"ANVIL_INDEX": str(target)}) as served:
        from_index = [asked(served, q) for q in questions]
        found = httpx.get(
            f"{served.url}/api/search",
            params={"searchText": "conversation history"},
            headers={"Authorization": f"Bearer {served.token('reader')}"},
        ).json()
        status = ready(served)["index"]
    assert found["results"] and found["indexVersion"] == version
    assert status["version"] == version and status["passages"] > 100  # type: ignore[index]
    with run_anvil(tmp_path / "b", {"ANVIL_CORPUS_DIR": str(DOCS)}) as built:
        from_folder = [asked(built, q) for q in questions]
    assert from_index == from_folder
    assert all(answer["sources"] for answer in from_index)
    # The folder's own index is kept in its data folder, for the next start.
    assert [p.suffix for p in (tmp_path / "b" / "index-cache").iterdir()] == [".anvilidx"]


def test_an_index_names_its_knowledge_and_the_server_says_so_unless_its_settings_say_otherwise(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "birds"
    folder.mkdir()
    (folder / "robin.md").write_text("# Robins\n\nRobins sing at dawn.\n", encoding="utf-8")
    target = tmp_path / "birds.anvilidx"
    named = ("--name", "the field guide", "--description", "  the birds   of the park ")
    ran = anvil("index", str(folder), "--output", str(target), *named)
    assert ran.returncode == 0, ran.stderr
    with run_anvil(tmp_path / "a", {"ANVIL_INDEX": str(target)}) as served:
        said = ready(served)["index"]
    assert (said["name"], said["description"]) == ("the field guide", "the birds of the park")  # type: ignore[index]
    with run_anvil(
        tmp_path / "b", {"ANVIL_INDEX": str(target), "ANVIL_KNOWLEDGE_NAME": "Park birds"}
    ) as served:
        said = ready(served)["index"]
    assert (said["name"], said["description"]) == ("Park birds", "the birds of the park")  # type: ignore[index]
    for bad, told in ((("--name", " "), "it is empty"), (("--description", "x" * 501), "give at most 500")):
        refused = anvil("index", str(folder), "--output", str(tmp_path / "other.anvilidx"), *bad)
        assert refused.returncode == 2 and told in refused.stderr, refused.stderr


def test_sources_and_targets_the_command_cannot_use_are_refused_with_what_to_give(tmp_path: Path) -> None:
    for args, said in (
        ([str(tmp_path / "missing"), "--output", str(tmp_path / "i")], "is not a folder of documents"),
        (["ftp://example.com/docs/", "--output", str(tmp_path / "i")], "is neither a folder nor a blob URL"),
        ([str(DOCS), "--output", str(tmp_path)], "is a folder: name the index file to write"),
        ([str(DOCS), "--output", str(tmp_path / "i.partial")], "name it otherwise"),
        ([str(DOCS), "--output", "https://acct.blob.core.windows.net/c/i.partial"], "name it otherwise"),
    ):
        ran = anvil("index", *args)
        assert ran.returncode == 2 and said in ran.stderr, ran.stderr
    assert not (tmp_path / "i").exists() and not (tmp_path / "i.partial").exists()


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


def ready(server: AnvilServer) -> dict[str, object]:
    body: dict[str, object] = httpx.get(f"{server.url}/readyz", timeout=10).json()
    return body


def wait_for_version(server: AnvilServer, version: str, deadline: float) -> None:
    """Poll `/readyz` (a condition, not a fixed wait) until it names `version`."""
    while ready(server)["index"]["version"] != version:  # type: ignore[index]
        assert time.monotonic() < deadline, f"{version} was never served: {ready(server)}"
        time.sleep(0.05)


def test_a_new_index_is_swapped_in_under_load_with_no_failed_ask(tmp_path: Path) -> None:
    tides, winds = tmp_path / "tides", tmp_path / "winds"
    for folder, text in (
        (tides, "The tide turns twice a day."),
        (winds, "Monsoon winds turn with the seasons."),
    ):
        folder.mkdir()
        (folder / "page.md").write_text(f"# Page\n\n{text}\n")
    served = tmp_path / "served.anvilidx"
    assert anvil("index", str(tides), "--output", str(served)).returncode == 0
    env = {"ANVIL_INDEX": str(served), "ANVIL_INDEX_REFRESH_SECONDS": "0.1"}
    with run_anvil(tmp_path / "data", env) as server:
        first = ready(server)["index"]
        token = server.token("reader")
        failures: list[str] = []
        answers: list[str] = []
        stop = threading.Event()

        def asking() -> None:
            with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
                while not stop.is_set():
                    response = http.post(f"{server.url}/api/ask", json={"question": "What turns?"})
                    if response.status_code != 200:
                        failures.append(f"{response.status_code} {response.text}")
                    else:
                        answers.append(response.json()["answer"])

        askers = [threading.Thread(target=asking) for _ in range(16)]
        for asker in askers:
            asker.start()
        try:
            versions = []
            for folder in (winds, tides, winds):
                ran = anvil("index", str(folder), "--output", str(served))
                version = ran.stderr.split("version ", 1)[1].split(",", 1)[0]
                wait_for_version(server, version, time.monotonic() + 30)
                versions.append(version)
            # A damaged new file is never swapped in: the last version keeps serving, and says why.
            served.write_bytes(served.read_bytes()[:-7])
            deadline = time.monotonic() + 30
            while "kept serving version" not in server.log():
                assert time.monotonic() < deadline, server.log()
                time.sleep(0.05)
            status = httpx.get(f"{server.url}/readyz", timeout=10)
        finally:
            stop.set()
            for asker in askers:
                asker.join()
    assert failures == []
    assert len(set(versions)) == 2 and versions[0] != first["version"]  # type: ignore[index]
    assert status.status_code == 200 and status.json()["index"]["version"] == versions[-1]
    assert any("tide" in a for a in answers) and any("Monsoon" in a for a in answers)
    assert f"kept serving version {versions[-1]}: {served} is truncated or damaged" in server.log()


def test_a_folder_published_at_a_site_gives_citations_with_links(tmp_path: Path) -> None:
    target = tmp_path / "docs.anvilidx"
    ran = anvil("index", f"{DOCS}=https://docs.example.com/anvil/", "--output", str(target))
    assert ran.returncode == 0, ran.stderr
    with run_anvil(tmp_path / "data", {"ANVIL_INDEX": str(target)}) as served:
        answer = asked(served, "How long does a conversation live?")
    (first, *_) = answer["sources"]  # type: ignore[misc]
    assert first["url"].startswith(f"https://docs.example.com/anvil/{first['source'].removesuffix('.md')}")
    bad = anvil("index", f"{DOCS}=https://", "--output", str(target))
    assert bad.returncode == 2 and f"the site of '{DOCS}' must be an absolute" in bad.stderr
