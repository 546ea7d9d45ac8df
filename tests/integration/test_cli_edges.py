"""The command line's edges, as a user meets them: token lifetimes out of bounds, a reader that
closes the pipe early, list settings in JSON at `anvil serve` start-up."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import jwt
import pytest
from support.anvil_server import AnvilServer, anvil_command, free_port, run_anvil
from support.preloaded_anvil import preloaded_anvil_command

from app.auth.dev import KEY_FILE_NAME, MAX_TTL_SECONDS, DevIssuer

RUN_TIMEOUT = 60
THIRTY_DAYS = 30 * 24 * 3600
#: What a closed pipe must not print on stderr.
NOISE = ("Traceback", "Exception ignored", "BrokenPipeError", "Broken pipe")


def child_env(*, unbuffered: bool = False, **env: str) -> dict[str, str]:
    """The test's environment without ANVIL_ variables, plus `env`. Python buffers a pipe's
    output unless PYTHONUNBUFFERED is set (a closed pipe then fails at a later write)."""
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("ANVIL_")}
    base.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        base["PYTHONUNBUFFERED"] = "1"
    return {**base, **env}


def anvil(*args: str, cwd: Path, preloaded: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    """`anvil ARGS` from the console script, or with `preloaded` a child of the preloaded
    interpreter (`support.preloaded_anvil`) where what is checked is not how a process starts."""
    return subprocess.run(
        [*(preloaded_anvil_command() if preloaded else anvil_command()), *args],
        cwd=cwd,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def assert_quiet(stderr: str) -> None:
    for noise in NOISE:
        assert noise not in stderr, stderr


# --- anvil token --ttl ----------------------------------------------------------------------------


@pytest.mark.parametrize("ttl", ["0", "-1", "999999999999", str(THIRTY_DAYS + 1), "1.5", "an hour", ""])
def test_a_ttl_out_of_bounds_is_a_usage_error_naming_them(tmp_path: Path, ttl: str) -> None:
    data_dir = tmp_path / "data"
    ran = anvil("token", "--user", "alice", f"--ttl={ttl}", cwd=tmp_path, ANVIL_DATA_DIR=str(data_dir))
    assert ran.returncode == 2
    assert ran.stdout == ""
    assert_quiet(ran.stderr)
    last = ran.stderr.splitlines()[-1]
    assert last.startswith("anvil token: error: argument --ttl: ")
    assert f"{ttl!r} is not a lifetime from 1 second to 30 days" in last and str(THIRTY_DAYS) in last
    # Refused before anything was written.
    assert not (data_dir / KEY_FILE_NAME).exists()


def test_a_negative_ttl_after_a_space_is_refused_too(tmp_path: Path) -> None:
    ran = anvil("token", "--user", "alice", "--ttl", "-1", cwd=tmp_path, ANVIL_DATA_DIR=str(tmp_path))
    assert ran.returncode == 2
    assert "argument --ttl: '-1' is not a lifetime" in ran.stderr


@pytest.mark.parametrize("ttl", [1, THIRTY_DAYS])
def test_a_ttl_at_either_bound_is_the_tokens_lifetime(tmp_path: Path, ttl: int) -> None:
    ran = anvil(
        "token",
        "--user",
        "alice",
        "--ttl",
        str(ttl),
        cwd=tmp_path,
        preloaded=True,
        ANVIL_DATA_DIR=str(tmp_path),
    )
    assert ran.returncode == 0, ran.stderr
    claims = jwt.decode(ran.stdout.strip(), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == ttl


def test_the_issuer_refuses_the_same_lifetimes(tmp_path: Path) -> None:
    issuer = DevIssuer.load_or_create(tmp_path)
    assert MAX_TTL_SECONDS == THIRTY_DAYS
    for ttl in (0, -1, THIRTY_DAYS + 1, True):
        with pytest.raises(ValueError, match="ttl must be from 1 second to 30 days"):
            issuer.mint("alice", ttl=ttl)
    claims = jwt.decode(issuer.mint("alice", ttl=THIRTY_DAYS), options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == THIRTY_DAYS


# --- a closed pipe --------------------------------------------------------------------------------


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_ask_into_a_reader_that_closes_early_exits_quietly(
    dev_server: AnvilServer, tmp_path: Path, unbuffered: bool
) -> None:
    """`anvil ask --json ... | head -c 10`, the answer larger than the pipe holds: anvil is still
    writing when the reader goes away."""
    fcntl = pytest.importorskip("fcntl")
    question = "x" * 6000  # echoed back: an answer of more than the pipe's 4 KiB
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
        process = subprocess.Popen(
            [*anvil_command(), "ask", "--json", question],
            cwd=tmp_path,
            env=child_env(
                unbuffered=unbuffered, ANVIL_URL=dev_server.url, ANVIL_DATA_DIR=str(dev_server.data_dir)
            ),
            stdout=write_end,
            stderr=subprocess.PIPE,
        )
        os.close(write_end)
        write_end = -1
        try:
            first = os.read(read_end, 10)
            os.close(read_end)
            read_end = -1
            _, stderr = process.communicate(timeout=RUN_TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    finally:
        for end in (read_end, write_end):
            if end >= 0:
                os.close(end)
    assert first == b'{\n  "answe'
    assert stderr.decode() == ""
    assert process.returncode == 141


@pytest.mark.parametrize(
    "args",
    [
        ["ask", "Hello?"],
        ["ask", "--json", "Hello?"],
        ["token", "--user", "alice"],
        ["openapi"],
        ["--version"],
        ["--help"],
        ["token", "--help"],
    ],
    ids=" ".join,
)
def test_every_command_into_a_closed_pipe_exits_quietly(
    dev_server: AnvilServer, tmp_path: Path, args: list[str]
) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        ran = subprocess.run(
            [*anvil_command(), *args],
            cwd=tmp_path,
            env=child_env(ANVIL_URL=dev_server.url, ANVIL_DATA_DIR=str(dev_server.data_dir)),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    finally:
        os.close(write_end)
    assert_quiet(ran.stderr)
    # What stderr says of its own (the key `anvil token` signed with) is still said.
    assert all(line.startswith("anvil: ") for line in ran.stderr.splitlines()), ran.stderr
    assert ran.returncode == 141


def test_the_bridge_into_a_closed_pipe_exits_quietly(dev_server: AnvilServer, tmp_path: Path) -> None:
    """A host that stops reading: the bridge's answer to `initialize` cannot be written."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        ran = subprocess.run(
            [*anvil_command(), "bridge"],
            cwd=tmp_path,
            env=child_env(ANVIL_URL=dev_server.url, ANVIL_DATA_DIR=str(dev_server.data_dir)),
            input=json.dumps(initialize) + "\n",
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    finally:
        os.close(write_end)
    assert_quiet(ran.stderr)
    # 141 when the answer was written before the end of stdin ended the session, else 0.
    assert ran.returncode in (0, 141), ran.stderr


# --- list settings at start-up --------------------------------------------------------------------


def test_serve_takes_a_json_list_of_allowed_hosts(tmp_path: Path) -> None:
    env = {
        "ANVIL_ANSWER_ENGINE": "echo",
        "ANVIL_STORE": "memory",
        "ANVIL_ALLOWED_HOSTS": '["a.example", "b.example"]',
    }
    with run_anvil(tmp_path, env) as server:
        token = server.token("list-user")
        headers = {"Authorization": f"Bearer {token}"}
        for host in ("a.example", "b.example"):
            answered = httpx.post(
                f"{server.url}/api/ask",
                json={"question": "Who is there?", "conversationId": f"list-{uuid.uuid4().hex[:8]}"},
                headers={**headers, "Host": host},
            )
            assert answered.status_code == 200, answered.text
            assert answered.json()["answer"].startswith("Echo: Who is there?")
        refused = httpx.post(
            f"{server.url}/api/ask", json={"question": "And me?"}, headers={**headers, "Host": "c.example"}
        )
        assert refused.status_code == 421


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ANVIL_ALLOWED_HOSTS", '["a.example","b.example"'),
        ("ANVIL_ALLOWED_ORIGINS", '["https://a.example", 7]'),
        ("ANVIL_ENTRA_REQUIRED_SCOPES", '["access_as_user", ""]'),
        ("ANVIL_ALLOWED_HOSTS", '"a.example","b.example"'),
    ],
)
def test_serve_refuses_a_malformed_list_in_one_line(tmp_path: Path, variable: str, value: str) -> None:
    port = str(free_port())
    ran = anvil("serve", cwd=tmp_path, ANVIL_DATA_DIR=str(tmp_path), ANVIL_PORT=port, **{variable: value})
    assert ran.returncode == 2
    assert ran.stdout == ""
    [line] = ran.stderr.splitlines()
    assert line.startswith(f"anvil: invalid configuration: {variable}: "), line
    assert '(one,two) or a JSON list of strings (["one","two"])' in line
