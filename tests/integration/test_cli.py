"""The `anvil` command line as a user runs it: --version, token, and ask against live servers."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.anvil_server import AnvilServer, anvil_command, free_port
from support.preloaded_anvil import preloaded_anvil_command

from app import __version__
from app.auth.dev import KEY_FILE_NAME
from app.client.tokens import local_user

RUN_TIMEOUT = 60
ENVELOPE_KEYS = {"answer", "conversationId", "note", "created", "turn", "condensed", "sources", "usage"}


def anvil(*args: str, cwd: Path, fresh: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    """`anvil ARGS` in a child process with only the given ANVIL_ variables set: a child of the
    preloaded interpreter (`support.preloaded_anvil`), or with `fresh` the console script, where
    what is checked happens while the interpreter starts (argument parsing, `--version`)."""
    child_env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ANVIL_")}
    child_env.update(env)
    return subprocess.run(
        [*(anvil_command() if fresh else preloaded_anvil_command()), *args],
        cwd=cwd,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def ask(server: AnvilServer, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`anvil ask ARGS` against `server`, signing in the way a local user would: the default dev
    token from the server's data folder."""
    return anvil("ask", *args, cwd=cwd, ANVIL_URL=server.url, ANVIL_DATA_DIR=str(server.data_dir), **env)


def one_error_line(ran: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed run (and nothing on stdout)."""
    assert ran.stdout == "", ran.stdout
    assert "Traceback" not in ran.stderr
    lines = ran.stderr.splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("anvil: ")
    return lines[0]


# --- --version and token -------------------------------------------------------------------------


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    ran = anvil("--version", cwd=tmp_path, fresh=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"anvil {__version__}\n"


def test_token_names_its_key_and_warns_only_when_it_had_to_create_one(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"

    first = anvil("token", "--user", "alice", cwd=tmp_path, ANVIL_DATA_DIR=str(data_dir))
    assert first.returncode == 0, first.stderr
    [minted] = first.stdout.splitlines()
    assert minted.count(".") == 2
    named, warning = first.stderr.splitlines()
    assert named == f"anvil: signing with the dev key in {data_dir.resolve()} ({KEY_FILE_NAME})"
    assert warning.startswith("anvil: warning:") and "ANVIL_DATA_DIR" in warning
    assert (data_dir / KEY_FILE_NAME).exists()

    second = anvil("token", "--user", "alice", cwd=tmp_path, ANVIL_DATA_DIR=str(data_dir))
    assert second.returncode == 0, second.stderr
    assert second.stderr.splitlines() == [named]
    assert len(second.stdout.splitlines()) == 1


def test_token_defaults_to_the_relative_data_folder_and_names_it_absolute(tmp_path: Path) -> None:
    ran = anvil("token", "--user", "alice", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert f"in {tmp_path.resolve() / '.anvil'} (" in ran.stderr.splitlines()[0]


def test_token_for_a_bad_user_creates_no_key(tmp_path: Path) -> None:
    ran = anvil("token", "--user", "bad name", cwd=tmp_path, ANVIL_DATA_DIR=str(tmp_path / "d"))
    assert ran.returncode == 2
    one_error_line(ran)
    assert not (tmp_path / "d" / KEY_FILE_NAME).exists()


def test_a_token_minted_for_the_servers_folder_is_accepted(dev_server: AnvilServer, tmp_path: Path) -> None:
    minted = anvil("token", "--user", "cli-bob", cwd=tmp_path, ANVIL_DATA_DIR=str(dev_server.data_dir))
    assert minted.returncode == 0, minted.stderr
    assert "warning" not in minted.stderr
    # Another data folder for the local settings: only the token given signs in.
    conversation = f"cli-{uuid.uuid4().hex}"
    ran = anvil(
        "ask",
        "--conversation",
        conversation,
        "Who am I?",
        cwd=tmp_path,
        ANVIL_URL=dev_server.url,
        ANVIL_DATA_DIR=str(tmp_path / "elsewhere"),
        ANVIL_TOKEN=minted.stdout.strip(),
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[-1].endswith(", turn 1)")
    assert not (tmp_path / "elsewhere").exists()
    # Whose conversation it is: the user the token names.
    assert f"of conversation {conversation} of cli-bob; to ask as another user, pass another" in ran.stderr


# --- ask -----------------------------------------------------------------------------------------


def test_ask_prints_the_answer_and_its_sources(docs_server: AnvilServer, tmp_path: Path) -> None:
    ran = ask(docs_server, "What is Anvil?", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    answer, sources = ran.stdout.rstrip("\n").split("\n\nSources:\n")
    assert answer.strip()
    lines = sources.splitlines()
    assert lines and all(line.startswith("- ") and line.endswith(")") for line in lines)
    assert any(line.startswith("- architecture.md (") for line in lines), lines
    # One-shot: no conversation line, and nothing said about it.
    assert "(conversation " not in ran.stdout
    assert ran.stderr == ""


def test_ask_json_prints_the_whole_envelope(docs_server: AnvilServer, tmp_path: Path) -> None:
    ran = ask(docs_server, "--json", "What is Anvil?", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    envelope = json.loads(ran.stdout)
    assert set(envelope) == ENVELOPE_KEYS
    assert envelope["conversationId"] is None and envelope["turn"] is None
    assert {"source", "heading", "score"} <= set(envelope["sources"][0])
    assert ran.stdout.startswith("{\n  ")  # indented


def test_ask_continues_a_conversation(dev_server: AnvilServer, tmp_path: Path) -> None:
    conversation = f"cli-{uuid.uuid4().hex}"
    first = ask(dev_server, "--conversation", conversation, "What is Anvil?", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["Echo: What is Anvil?", "", f"(conversation {conversation}, turn 1)"]
    # The dev token is this machine's user's: said, with how to ask as someone else.
    assert first.stderr == (
        f"anvil: turn 1 of conversation {conversation} of dev user {local_user()} (this machine's "
        'user name); to ask as another user, pass --token "$(anvil token --user NAME)"\n'
    )

    second = ask(dev_server, "--conversation", conversation, "--json", "And then?", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    envelope = json.loads(second.stdout)
    assert envelope["turn"] == 2 and envelope["created"] is False
    assert envelope["answer"] == "Echo: And then? (turn 2; previous question: What is Anvil?)"


def test_instructions_for_an_existing_conversation_fail_with_the_servers_detail(
    dev_server: AnvilServer, tmp_path: Path
) -> None:
    conversation = f"cli-{uuid.uuid4().hex}"
    created = ask(
        dev_server, "--conversation", conversation, "--instructions", "Be brief.", "Hi", cwd=tmp_path
    )
    assert created.returncode == 0, created.stderr

    again = ask(dev_server, "--conversation", conversation, "--instructions", "Be long.", "Hi", cwd=tmp_path)
    assert again.returncode == 6
    line = one_error_line(again)
    assert "HTTP 409" in line and "instructions bind when a conversation is created" in line


def test_a_bad_token_is_refused_in_one_line(dev_server: AnvilServer, tmp_path: Path) -> None:
    ran = ask(dev_server, "--token", "not-a-token", "What is Anvil?", cwd=tmp_path)
    assert ran.returncode == 4
    line = one_error_line(ran)
    assert "sign-in was refused" in line and "--token" in line and "ANVIL_TOKEN" in line


def test_a_data_folder_without_a_key_sends_no_token_and_says_so(
    dev_server: AnvilServer, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    ran = anvil("ask", "Hi", cwd=tmp_path, ANVIL_URL=dev_server.url, ANVIL_DATA_DIR=str(other))
    assert ran.returncode == 4
    line = one_error_line(ran)
    assert f"no dev key in {other.resolve()}" in line and "ANVIL_DATA_DIR" in line
    assert not other.exists()


def test_no_server_is_exit_3_naming_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    ran = anvil("ask", "--url", url, "Hi", cwd=tmp_path, ANVIL_DATA_DIR=str(tmp_path))
    assert ran.returncode == 3
    line = one_error_line(ran)
    assert url in line and "anvil serve" in line


@pytest.mark.parametrize("command", ["login", "logout"])
def test_login_and_logout_have_nothing_to_do_where_the_server_asks_for_no_sign_in(
    anon_server: AnvilServer, tmp_path: Path, command: str
) -> None:
    ran = anvil(command, "--url", anon_server.url, cwd=tmp_path)
    expected = f"anvil: {anon_server.url} asks for no sign-in; nothing to do\n"
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, expected, "")


@pytest.mark.parametrize("command", ["login", "logout"])
def test_login_and_logout_without_a_server_are_exit_3_naming_the_url(tmp_path: Path, command: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    ran = anvil(command, "--url", url, cwd=tmp_path)
    assert ran.returncode == 3
    assert url in one_error_line(ran)


@pytest.mark.parametrize(
    "args",
    [
        ["--conversation", "not an id", "Hi"],
        ["--url", "localhost:8000", "Hi"],
        ["   "],
    ],
)
def test_invalid_arguments_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    ran = anvil("ask", *args, cwd=tmp_path, fresh=True, ANVIL_DATA_DIR=str(tmp_path))
    assert ran.returncode == 2
    assert "Traceback" not in ran.stderr and ran.stdout == ""
    assert ran.stderr.splitlines()[-1].startswith("anvil ask: error:")


def test_the_clients_own_variables_are_not_taken_for_misspelt_settings(tmp_path: Path) -> None:
    ran = anvil(
        "token",
        "--user",
        "alice",
        cwd=tmp_path,
        ANVIL_DATA_DIR=str(tmp_path),
        ANVIL_URL="http://127.0.0.1:1",
        ANVIL_TOKEN="x",
    )
    assert ran.returncode == 0, ran.stderr


# --- a busy server -------------------------------------------------------------------------------


class Busy(BaseHTTPRequestHandler):
    """Answers every POST like a busy Anvil: 503, a problem document and Retry-After."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps({"status": 503, "title": "Service Unavailable", "detail": "Too busy."}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Retry-After", "7")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        """Quiet."""


@pytest.fixture
def busy_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_busy_server_is_exit_5_with_the_wait(busy_url: str, tmp_path: Path) -> None:
    ran = anvil("ask", "--url", busy_url, "--token", "t", "Hi", cwd=tmp_path)
    assert ran.returncode == 5
    line = one_error_line(ran)
    assert "busy" in line and "Too busy." in line and "retry in 7 s" in line
