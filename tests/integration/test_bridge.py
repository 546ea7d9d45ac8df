"""`anvil bridge` as a stdio-only host runs it: the Python SDK's stdio client starts the bridge,
which forwards to a real `anvil serve`; what the host sees is compared with what a client talking
to the server directly sees."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from support.anvil_server import AnvilServer, anvil_command, free_port, run_anvil
from support.openai_server import FakeOpenAI, Reply, running_openai
from support.preloaded_anvil import preloaded_anvil_command

pytestmark = pytest.mark.anyio

#: A host of each era: the initialize handshake, and `server/discover` then the 2026-07-28
#: per-request envelope.
HOST_MODES = ["legacy", "auto"]
ERA = {"legacy": "2025-11-25", "auto": "2026-07-28"}
RUN_TIMEOUT = 60


def bridge_parameters(url: str, *args: str, **env: str) -> StdioServerParameters:
    """How a host's configuration starts the bridge: the command, its arguments, its variables (the
    command a child of the preloaded interpreter: what is checked here is the session it serves)."""
    command, *prefix = preloaded_anvil_command()
    return StdioServerParameters(command=command, args=[*prefix, "bridge", "--url", url, *args], env=env)


@asynccontextmanager
async def bridged(
    server: AnvilServer, mode: str, *args: str, stderr: Path | None = None, **env: str
) -> AsyncIterator[Client]:
    """A host connected to a bridge in front of `server`, signing in as a local user would (the
    dev key of the server's data folder)."""
    parameters = bridge_parameters(server.url, *args, ANVIL_DATA_DIR=str(server.data_dir), **env)
    with (stderr or Path(os.devnull)).open("w") as errlog:
        async with Client(stdio_client(parameters, errlog=errlog), mode=mode) as client:  # type: ignore[arg-type]
            yield client


@asynccontextmanager
async def direct(server: AnvilServer, token: str | None) -> AsyncIterator[Client]:
    """A client talking to `server` itself, for comparison."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(server.mcp_url, http_client=http)
        async with Client(transport, mode="auto", cache=None) as client:  # type: ignore[arg-type]
            yield client


def structured(result: Any) -> dict[str, Any]:
    assert result.is_error is False, result.content
    data = result.structured_content
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("mode", HOST_MODES)
async def test_the_host_sees_the_servers_name_instructions_and_tools_unchanged(
    dev_server: AnvilServer, mode: str
) -> None:
    async with direct(dev_server, dev_server.token("alice")) as server_side:
        tools = (await server_side.list_tools()).tools
        instructions = server_side.instructions
    async with bridged(dev_server, mode) as host:
        assert host.protocol_version == ERA[mode]
        assert host.server_info is not None and host.server_info.name == "anvil"
        assert host.instructions == instructions and instructions
        seen = (await host.list_tools()).tools
    assert [t.model_dump() for t in seen] == [t.model_dump() for t in tools]
    annotations = {t.name: t.annotations for t in seen}
    assert annotations["search"] is not None and annotations["search"].read_only_hint is True
    assert annotations["delete_conversation"] is not None
    assert annotations["delete_conversation"].destructive_hint is True
    assert annotations["delete_conversation"].idempotent_hint is True
    assert annotations["ask"] is not None and annotations["ask"].read_only_hint is False


@pytest.mark.parametrize("mode", HOST_MODES)
async def test_two_asks_with_one_conversation_id_continue_it(dev_server: AnvilServer, mode: str) -> None:
    conversation = f"bridge-{mode}-{uuid.uuid4().hex[:8]}"
    async with bridged(dev_server, mode) as host:
        first = structured(
            await host.call_tool("ask", {"question": "What is Anvil?", "conversationId": conversation})
        )
        second = structured(
            await host.call_tool("ask", {"question": "And its store?", "conversationId": conversation})
        )
    assert (first["turn"], second["turn"]) == (1, 2)
    assert "previous question: What is Anvil?" in second["answer"]
    # The turns were stored for the OS user the bridge signed in as, which the server confirms.
    async with direct(dev_server, dev_server.token(_local_user())) as server_side:
        stored = structured(await server_side.call_tool("get_conversation", {"conversationId": conversation}))
    assert [turn["question"] for turn in stored["turns"]] == ["What is Anvil?", "And its store?"]


def _local_user() -> str:
    from app.client.tokens import local_user

    return local_user()


@pytest.mark.parametrize("mode", HOST_MODES)
async def test_errors_reach_the_host_as_the_server_wrote_them(dev_server: AnvilServer, mode: str) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("no_such_tool", {}),
        ("ask", {"question": "x", "conversationId": "has spaces"}),
        ("get_conversation", {"conversationId": f"missing-{uuid.uuid4().hex[:8]}"}),
    ]

    async def outcomes(client: Client) -> list[Any]:
        seen: list[Any] = []
        for name, arguments in calls:
            try:
                result = await client.call_tool(name, arguments)
            except MCPError as error:
                seen.append(("json-rpc error", error.code, error.message))
            else:
                seen.append(("result", result.is_error, [c.model_dump() for c in result.content]))
        return seen

    async with direct(dev_server, dev_server.token(_local_user())) as server_side:
        expected = await outcomes(server_side)
    async with bridged(dev_server, mode) as host:
        seen = await outcomes(host)
    assert seen == expected
    assert expected[0][0] == "json-rpc error" and expected[2] == ("result", True, expected[2][2])


async def test_a_server_without_sign_in_is_bridged_without_a_token(anon_server: AnvilServer) -> None:
    async with bridged(anon_server, "auto") as host:
        answer = structured(await host.call_tool("ask", {"question": "Anyone there?"}))
    assert answer["answer"] == "Echo: Anyone there?"


# --- progress ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with running_openai() as server:
        yield server


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI) -> Iterator[AnvilServer]:
    corpus = tmp_path_factory.mktemp("corpus")
    (corpus / "signin.md").write_text("# Sign-in\n\nAnvil validates Microsoft Entra access tokens.\n")
    env = {
        "ANVIL_ANSWER_ENGINE": "openai",
        "ANVIL_OPENAI_BASE_URL": f"{fake.url}/v1",
        "ANVIL_OPENAI_MODEL": "local-model",
        "ANVIL_OPENAI_API_KEY": "sk-local-bridge-test",
        "ANVIL_CORPUS_DIR": str(corpus),
    }
    with run_anvil(tmp_path_factory.mktemp("bridge-model"), env) as running:
        yield running


@pytest.mark.parametrize("mode", HOST_MODES)
async def test_progress_notifications_reach_the_host_before_the_result(
    model_server: AnvilServer, fake: FakeOpenAI, mode: str
) -> None:
    fake.script(Reply("Tokens are validated against Entra [1].", chunks=5))
    updates: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, message))

    async with bridged(model_server, mode) as host:
        result = await host.call_tool(
            "ask", {"question": "How does sign-in work?"}, progress_callback=on_progress
        )
    assert structured(result)["answer"] == "Tokens are validated against Entra [1]."
    assert any(message == "Writing the answer" for _, message in updates), updates
    values = [value for value, _ in updates]
    assert values == sorted(values) and len(set(values)) == len(values)


# --- failures on start ---------------------------------------------------------------------------


def run_bridge(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`anvil bridge --url URL ARGS` with nothing on stdin, as a host that leaves at once."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    return subprocess.run(
        [*anvil_command(), "bridge", "--url", url, *args],
        env={**child_env, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def one_line(ran: subprocess.CompletedProcess[str]) -> str:
    assert ran.stdout == "", "stdout belongs to the host's protocol"
    assert "Traceback" not in ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    return lines[0]


def test_a_server_that_cannot_be_reached_is_one_line_and_exit_3(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    ran = run_bridge(url, ANVIL_DATA_DIR=str(tmp_path))
    assert ran.returncode == 3
    assert one_line(ran) == f"anvil bridge: {url}/mcp could not be reached: All connection attempts failed"


def test_a_refused_token_is_one_line_naming_the_servers_reason_and_exit_4(dev_server: AnvilServer) -> None:
    ran = run_bridge(dev_server.url, "--token", "not-a-token")
    assert ran.returncode == 4
    assert one_line(ran).startswith(f"anvil bridge: {dev_server.mcp_url} refused sign-in (HTTP 401): ")
    assert "malformed" in ran.stderr


def test_a_local_dev_server_without_a_key_here_says_so(dev_server: AnvilServer, tmp_path: Path) -> None:
    ran = run_bridge(dev_server.url, ANVIL_DATA_DIR=str(tmp_path))
    assert ran.returncode == 4
    assert f"no dev key in {tmp_path.resolve()}, so no token was sent" in one_line(ran)


def test_the_bridge_is_listed_in_the_commands_help() -> None:
    ran = subprocess.run(
        [*anvil_command(), "bridge", "--help"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0 and "--url" in ran.stdout and "stdio" in ran.stdout
