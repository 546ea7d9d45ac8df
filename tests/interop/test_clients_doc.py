"""docs/clients.md: its snippets run against a live server, and its JSON has the keys clients read."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from support.anvil_server import AnvilServer
from support.preloaded_anvil import preloaded_anvil_command

REPO_ROOT = Path(__file__).resolve().parents[2]
DOC = (REPO_ROOT / "docs" / "clients.md").read_text(encoding="utf-8")
LOCAL_MCP = "http://127.0.0.1:8000/mcp"
RUN_TIMEOUT = 60


def sections(markdown: str) -> dict[str, str]:
    """The text under each `##`/`###` heading, keyed by the heading."""
    parts = re.split(r"^#{2,3} (.+)$", markdown, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


SECTIONS = sections(DOC)


def only_block(section: str, language: str) -> str:
    found = blocks(SECTIONS[section], language)
    assert len(found) == 1, f"{section}: expected one {language} block, found {len(found)}"
    return found[0]


def json_blocks(section: str) -> list[dict[str, Any]]:
    return [json.loads(block) for block in blocks(SECTIONS[section], "json")]


def local_anvil() -> str:
    """What stands for `.venv/bin/anvil` in a snippet: a child of the preloaded interpreter
    (`support.preloaded_anvil`), since the snippets check what the commands do, not how the
    interpreter starts."""
    return " ".join(preloaded_anvil_command())


def local_shell(server: AnvilServer, script: str) -> subprocess.CompletedProcess[str]:
    """Run a bash snippet from the page against `server` instead of 127.0.0.1:8000."""
    script = script.replace("http://127.0.0.1:8000", server.url)
    script = script.replace(".venv/bin/anvil", local_anvil())
    # python3 (for infra/smoke.sh) is the interpreter running the tests.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "ANVIL_DATA_DIR": str(server.data_dir)}
    env.pop("ANVIL_TOKEN", None)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def anvil_tools(server: AnvilServer) -> set[str]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {server.token('docs')}", "Accept": "application/json"}
    reply = httpx.post(server.mcp_url, json=body, headers=headers).json()
    return {tool["name"] for tool in reply["result"]["tools"]}


def test_every_json_snippet_is_checked_below() -> None:
    assert len(blocks(DOC, "json")) == 7


def test_vscode_configs_use_http_with_a_token_locally_and_none_with_entra() -> None:
    local, entra = json_blocks("VS Code")
    server = local["servers"]["anvil"]
    assert server == {
        "type": "http",
        "url": LOCAL_MCP,
        "headers": {"Authorization": "Bearer ${input:anvil-token}"},
    }
    [prompt] = local["inputs"]
    assert prompt["id"] == "anvil-token" and prompt["type"] == "promptString" and prompt["password"] is True
    assert entra == {"servers": {"anvil": {"type": "http", "url": "https://anvil.example.com/mcp"}}}


def test_copilot_coding_agent_config_reads_a_copilot_secret_and_allows_real_tools(
    dev_server: AnvilServer,
) -> None:
    [config] = json_blocks("Copilot coding agent")
    server = config["mcpServers"]["anvil"]
    assert server["type"] == "http" and server["url"] == "https://anvil.example.com/mcp"
    secret = re.fullmatch(r"Bearer \$(COPILOT_MCP_\w+)", server["headers"]["Authorization"])
    assert secret is not None and secret[1] in SECTIONS["Copilot coding agent"].replace("`", " ").split()
    assert server["tools"] and set(server["tools"]) <= anvil_tools(dev_server)


def test_copilot_cli_and_claude_code_configs_expand_the_token_from_the_environment() -> None:
    [cli] = json_blocks("Copilot CLI")
    [claude] = json_blocks("Claude Code")
    expected = {"type": "http", "url": LOCAL_MCP, "headers": {"Authorization": "Bearer ${ANVIL_TOKEN}"}}
    assert cli == {"mcpServers": {"anvil": {**expected, "tools": ["*"]}}}
    assert claude == {"mcpServers": {"anvil": expected}}


def test_the_claude_code_command_adds_an_http_server_with_the_header() -> None:
    command = only_block("Claude Code", "bash")
    assert (
        f'claude mcp add --transport http anvil {LOCAL_MCP} --header "Authorization: Bearer $TOKEN"'
        in command
    )


@pytest.mark.anyio
async def test_the_claude_desktop_config_starts_a_bridge_that_holds_a_conversation(
    dev_server: AnvilServer,
) -> None:
    [config] = json_blocks("Claude Desktop and other stdio hosts")
    entry = config["mcpServers"]["anvil"]
    assert set(entry) == {"command", "args"} and Path(entry["command"]).name == "anvil"
    args = [dev_server.url if arg == "https://anvil.example.com/mcp" else arg for arg in entry["args"]]
    assert args != entry["args"], "the config points the bridge at the example server"
    command, *prefix = preloaded_anvil_command()
    host = StdioServerParameters(
        command=command, args=[*prefix, *args], env={"ANVIL_DATA_DIR": str(dev_server.data_dir)}
    )
    conversation = f"desktop-{uuid.uuid4().hex[:8]}"
    with Path(os.devnull).open("w") as errlog:  # noqa: ASYNC230 (the null device never blocks)
        async with Client(stdio_client(host, errlog=errlog), mode="legacy") as anvil:  # type: ignore[arg-type]
            for question in ("What is Anvil?", "And its store?"):
                result = await anvil.call_tool("ask", {"question": question, "conversationId": conversation})
    assert isinstance(result.structured_content, dict) and result.structured_content["turn"] == 2


@pytest.mark.parametrize("block", blocks(DOC, "bash"))
def test_bash_snippets_parse(block: str) -> None:
    ran = subprocess.run(["bash", "-n", "-c", block], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr


PYTHON_MODES = ("legacy", "auto", "2026-07-28")
#: Runs the example once per mode in one interpreter, each as a `__main__` of its own with its own
#: ANVIL_TOKEN, and prints what each printed (or raised) as JSON: the example's imports cost more
#: than its run, and the runs share nothing but the imported modules.
EXAMPLE_RUNNER = """
import contextlib, io, json, os, sys, traceback

outcomes = {}
for mode, run in json.load(sys.stdin).items():
    os.environ["ANVIL_TOKEN"] = run["token"]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(run["code"], "<python example>", "exec"), {"__name__": "__main__"})
    except BaseException:
        outcomes[mode] = {"stdout": printed.getvalue(), "error": traceback.format_exc()}
    else:
        outcomes[mode] = {"stdout": printed.getvalue(), "error": None}
print(json.dumps(outcomes))
"""


@pytest.fixture(scope="module")
def python_example_runs(dev_server: AnvilServer) -> dict[str, dict[str, str | None]]:
    code = only_block("Python SDK", "python")
    # A user of its own each time: a worker given this module's tests at two moments runs the
    # example twice on one server, and the example's conversation id is fixed.
    run = uuid.uuid4().hex[:8]
    runs = {
        mode: {
            "code": code.replace(LOCAL_MCP, dev_server.mcp_url).replace('mode="auto"', f'mode="{mode}"'),
            "token": dev_server.token(f"docs-python-{mode}-{run}"),
        }
        for mode in PYTHON_MODES
    }
    ran = subprocess.run(
        [sys.executable, "-c", EXAMPLE_RUNNER],
        input=json.dumps(runs),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    outcomes: dict[str, dict[str, str | None]] = json.loads(ran.stdout.splitlines()[-1])
    return outcomes


@pytest.mark.parametrize("mode", PYTHON_MODES)
def test_the_python_example_holds_a_conversation_in_every_mode(
    python_example_runs: dict[str, dict[str, str | None]], mode: str
) -> None:
    code = only_block("Python SDK", "python")
    assert f'URL = "{LOCAL_MCP}"' in code and 'mode="auto"' in code
    ran = python_example_runs[mode]
    assert ran["error"] is None, ran["error"]
    assert str(ran["stdout"]).splitlines() == [
        "1 Echo: What is Anvil?",
        "2 Echo: Where does it keep conversations? (turn 2; previous question: What is Anvil?)",
    ]


def node_shell(
    node: Path, server: AnvilServer, script: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """A bash snippet from the page, with the repository's Node tools (Node 22, npx's packages)
    first on PATH and a home of its own (the tools keep files there)."""
    script = script.replace("http://127.0.0.1:8000", server.url)
    script = script.replace(".venv/bin/anvil", local_anvil())
    path = os.pathsep.join([str(node.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "HOME": str(tmp_path), "ANVIL_DATA_DIR": str(server.data_dir)}
    env.pop("ANVIL_TOKEN", None)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO_ROOT,  # npx finds the packages `npm ci` installed here, without a download
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def test_the_inspector_command_asks_in_a_conversation(
    node: Path, dev_server: AnvilServer, tmp_path: Path
) -> None:
    script = only_block("MCP Inspector", "bash")
    assert "npx @modelcontextprotocol/inspector --cli http://127.0.0.1:8000/mcp --transport http" in script
    ran = node_shell(node, dev_server, script, tmp_path)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["isError"] is False
    assert result["structuredContent"]["answer"] == "Echo: What is Anvil?"
    assert result["structuredContent"]["conversationId"] == "inspector-demo"
    assert result["content"] == [{"type": "text", "text": "Echo: What is Anvil?"}]


@pytest.mark.anyio
async def test_the_mcp_remote_config_bridges_a_host_to_anvil(
    node: Path, dev_server: AnvilServer, tmp_path: Path
) -> None:
    [config] = json_blocks("mcp-remote")
    entry = config["mcpServers"]["anvil"]
    assert entry["command"] == "npx" and entry["args"][0] == "mcp-remote"
    assert entry["env"] == {"ANVIL_AUTH_HEADER": "Bearer <token>"}
    args = [dev_server.mcp_url if arg == LOCAL_MCP else arg for arg in entry["args"]]
    assert args != entry["args"], "the config points at the local server"
    path = os.pathsep.join([str(node.parent), os.environ.get("PATH", "")])
    env = {
        "PATH": path,
        "HOME": str(tmp_path),
        "ANVIL_AUTH_HEADER": f"Bearer {dev_server.token('docs-remote')}",
    }
    host = StdioServerParameters(
        command=shutil.which("npx", path=path) or "npx", args=args, env=env, cwd=REPO_ROOT
    )
    conversation = f"remote-{uuid.uuid4().hex[:8]}"
    with Path(os.devnull).open("w") as errlog:  # noqa: ASYNC230 (the null device never blocks)
        async with Client(stdio_client(host, errlog=errlog), mode="legacy") as anvil:  # type: ignore[arg-type]
            tools = {tool.name for tool in (await anvil.list_tools()).tools}
            for question in ("What is Anvil?", "And its store?"):
                result = await anvil.call_tool("ask", {"question": question, "conversationId": conversation})
    assert tools == anvil_tools(dev_server)
    assert isinstance(result.structured_content, dict) and result.structured_content["turn"] == 2


def test_the_typescript_example_runs_as_written(node: Path, dev_server: AnvilServer) -> None:
    code = only_block("TypeScript SDK", "ts")
    client = (REPO_ROOT / "tests" / "interop" / "ts-client" / "anvil-client.mts").read_text()
    imports = [line for line in code.splitlines() if line.startswith("import ")]
    assert imports and all(line in client for line in imports)
    assert LOCAL_MCP in code
    swapped = code.replace(LOCAL_MCP, dev_server.mcp_url)
    ran = subprocess.run(
        [str(node), "--experimental-strip-types", "--input-type=module-typescript", "--eval", swapped],
        cwd=REPO_ROOT,  # resolves the SDK from the repository's node_modules
        env={**os.environ, "ANVIL_TOKEN": dev_server.token("docs-ts")},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "turn: 1" in ran.stdout and "conversationId: 'ts-demo'" in ran.stdout, ran.stdout


def test_the_typescript_run_command_names_the_client(node: Path, dev_server: AnvilServer) -> None:
    command = blocks(SECTIONS["TypeScript SDK"], "bash")[0]
    ran = local_shell(dev_server, command.replace("node_modules/.bin/node", str(node)))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip().endswith("anvil-client: all checks passed")


def test_the_curl_example_starts_a_conversation(dev_server: AnvilServer) -> None:
    ran = local_shell(dev_server, only_block("curl", "bash"))
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)["result"]
    assert result["structuredContent"]["turn"] == 1
    assert result["structuredContent"]["conversationId"] == "curl-demo"


def test_the_smoke_example_passes_against_a_live_server(dev_server: AnvilServer) -> None:
    command = only_block("Smoke-testing a server", "bash")
    ran = local_shell(dev_server, command)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines()[-1].startswith("ok    conversation:")
