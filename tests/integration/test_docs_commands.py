"""The commands of README.md, docs/clients.md and docs/development.md print what the pages show.

Every bash block of the three pages is accounted for below: run by a test of this module against
one real `anvil serve` on the embedded defaults, run by another test (named), or listed as not
runnable offline with the reason. A new block fails the first test until it is one of them, and
a block that shows output (`support.doc_blocks`) must be run. The other outputs the docs state
are checked here too: the command table against `anvil --help`, the `/readyz` examples against
what `/readyz` answers, the data folder against the list in configuration.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.doc_blocks import ROOT, Block, blocks, differs
from support.preloaded_anvil import preloaded_anvil_command

from app.cli.main import main
from app.client.tokens import local_user

PAGES = ("README.md", "docs/clients.md", "docs/development.md")
RUN_TIMEOUT = 60

#: Blocks run by this module: (page, heading) -> how many blocks are under the heading.
RUN_HERE = {("docs/clients.md", "The anvil command line"): 4}

DEV_SH = "tests/integration/test_dev_sh.py::test_dev_sh_serve_prints_what_the_docs_show"
README = "tests/integration/test_readme.py::test_try_it_examples_run_against_a_live_server"
CLIENTS = "tests/interop/test_clients_doc.py::test_the_"

#: Blocks another test runs as written, so that nothing is run twice: -> (blocks, the test).
RUN_ELSEWHERE = {
    # `./dev.sh test` is this suite itself, which CI runs as `.ci/run` (test_readme.py checks that).
    ("README.md", "Quick start"): (1, DEV_SH),
    ("README.md", "Try it"): (4, README),
    ("docs/clients.md", "MCP Inspector"): (1, CLIENTS + "inspector_command_asks_in_a_conversation"),
    ("docs/clients.md", "TypeScript SDK"): (1, CLIENTS + "typescript_run_command_names_the_client"),
    ("docs/clients.md", "curl"): (1, CLIENTS + "curl_example_starts_a_conversation"),
    ("docs/clients.md", "Smoke-testing a server"): (
        1,
        CLIENTS + "smoke_example_passes_against_a_live_server",
    ),
    ("docs/development.md", "The two commands"): (1, DEV_SH),
    ("docs/development.md", "What `./dev.sh serve` prints"): (1, DEV_SH),
}

#: Blocks that cannot run without the internet or an account: -> (blocks, why).
NOT_OFFLINE = {
    ("docs/clients.md", "Copilot CLI"): (1, "starts GitHub's Copilot CLI, which signs in to GitHub"),
    ("docs/clients.md", "Claude Code"): (1, "registers Anvil with Claude Code, which signs in to Anthropic"),
    ("docs/clients.md", "Signing in from the command line"): (1, "signs in with Microsoft Entra ID"),
    ("docs/development.md", "Dependencies and the lock file"): (
        1,
        "resolves the lock against the package index (test_lock.py checks the lock it makes)",
    ),
}


def page_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def test_every_command_block_is_run_or_listed() -> None:
    found: dict[tuple[str, str], int] = {}
    for block in page_blocks():
        found[(block.page, block.heading)] = found.get((block.page, block.heading), 0) + 1
    listed = {
        **RUN_HERE,
        **{key: count for key, (count, _) in RUN_ELSEWHERE.items()},
        **{key: count for key, (count, _) in NOT_OFFLINE.items()},
    }
    assert len(listed) == len(RUN_HERE) + len(RUN_ELSEWHERE) + len(NOT_OFFLINE), "a heading listed twice"
    assert found == listed


def test_the_tests_that_run_blocks_elsewhere_exist() -> None:
    for _, test in RUN_ELSEWHERE.values():
        path, name = test.split("::")
        assert re.search(rf"^(async )?def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.M), test


def test_every_block_that_shows_output_is_run() -> None:
    shown = {(block.page, block.heading) for block in page_blocks() if block.shown is not None}
    assert shown <= set(RUN_HERE) | set(RUN_ELSEWHERE)


# --- the blocks run here ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    """The embedded defaults, as `./dev.sh serve` runs them (by words alone, as every test server)."""
    with run_anvil(tmp_path_factory.mktemp("docs-commands")) as started:
        yield started


def run(block: Block, server: AnvilServer, cwd: Path) -> str:
    """Run `block` as written against `server`, and return what it printed, stdout and stderr in
    the order a terminal shows them."""
    script = block.text.replace(".venv/bin/anvil", shlex.join(preloaded_anvil_command()))
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ANVIL_")}
    # The server the page means by 127.0.0.1:8000 and its data folder; stdout written as it is
    # printed, as on a terminal, so that it keeps its place among the lines on stderr.
    env.update(ANVIL_URL=server.url, ANVIL_DATA_DIR=str(server.data_dir), PYTHONUNBUFFERED="1")
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout
    return ran.stdout


def assert_shows(block: Block, printed: str, server: AnvilServer) -> None:
    assert block.shown is not None, f"{block.key}: no output shown after it"
    replacements = {
        server.url: "http://127.0.0.1:8000",
        str(server.data_dir): "/home/alice/anvil/.anvil",
        f"dev user {local_user()} ": "dev user alice ",
    }
    problem = differs(block.shown, printed, replacements)
    assert problem is None, f"{block.key}: {problem}"


def anvil_line_blocks() -> list[Block]:
    found = [block for block in blocks("docs/clients.md") if block.heading == "The anvil command line"]
    assert len(found) == RUN_HERE[("docs/clients.md", "The anvil command line")]
    return found


def test_a_one_shot_ask_prints_the_answer_and_its_sources(server: AnvilServer, tmp_path: Path) -> None:
    one_shot = anvil_line_blocks()[0]
    assert_shows(one_shot, run(one_shot, server, tmp_path), server)


def test_asks_in_a_conversation_print_its_turns_and_the_envelope(server: AnvilServer, tmp_path: Path) -> None:
    _, conversation, as_json, _ = anvil_line_blocks()
    assert_shows(conversation, run(conversation, server, tmp_path), server)
    printed = run(as_json, server, tmp_path)
    assert_shows(as_json, printed, server)
    envelope = json.loads(printed)
    assert (envelope["conversationId"], envelope["turn"]) == ("cli-demo", 3)


def test_the_token_command_names_its_key_on_stderr(server: AnvilServer, tmp_path: Path) -> None:
    token = anvil_line_blocks()[3]
    assert_shows(token, run(token, server, tmp_path), server)


# --- other output the docs state ---------------------------------------------------------------


def printed_by(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """What `anvil ARGS` prints before it exits (`--help`)."""
    with contextlib.suppress(SystemExit):
        main(list(args))
    return capsys.readouterr().out


def test_the_command_table_of_development_md_is_what_anvil_help_lists(
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    table = page.split("| Command | What it does |\n| --- | --- |\n", 1)[1].split("\n\n", 1)[0]
    documented = {}
    for row in table.splitlines():
        words = re.split(r"(?<!\\)\|", row)[1].strip().strip("`").split()
        name = None if words[1].startswith("--") else words[1]
        documented[name] = set(re.findall(r"--[a-z-]+", " ".join(words[1:])))
    listed = printed_by(capsys, "--help").split("COMMAND\n", 1)[1].split("\n\n", 1)[0]
    commands = re.findall(r"^ {4}(\w+) ", listed, flags=re.M)
    assert set(documented) == {None, *commands}
    assert documented.pop(None) == {"--version"}
    for name, options in documented.items():
        usage = printed_by(capsys, name, "--help").split("\n\n", 1)[0]
        assert options == set(re.findall(r"--[a-z-]+", usage)) - {"--help"}, name


def test_the_readyz_examples_have_the_keys_readyz_answers(server: AnvilServer) -> None:
    answered = httpx.get(f"{server.url}/readyz").json()
    examples = [
        json.loads(block.text)
        for page in sorted((ROOT / "docs").glob("*.md"))
        for block in blocks(str(page.relative_to(ROOT)), "json")
        if '"checks"' in block.text and '"index"' in block.text
    ]
    assert len(examples) >= 3
    for example in examples:
        assert set(example) <= {"status", "checks", "index", "warnings"}
        assert set(example["index"]) == set(answered["index"]), example


def test_the_data_folder_holds_only_what_configuration_md_lists(server: AnvilServer) -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = page.split("## Where Anvil keeps its data\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- `([^`]+?)/?`", section, flags=re.M))
    written = {path.name for path in server.data_dir.iterdir()} - {server.log_path.name}
    sqlite = {"conversations.sqlite3-wal", "conversations.sqlite3-shm"}  # named in its line
    assert written - sqlite <= listed and "index-cache" in written
    assert [path.suffix for path in (server.data_dir / "index-cache").iterdir()] == [".anvilidx"]
