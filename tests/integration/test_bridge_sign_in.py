"""A user's Microsoft Entra sign-in through the command line and the bridge, with real MSAL, a real
`anvil serve` in Entra mode and the local Entra stand-in (TLS, device code, refresh tokens).

The story a user lives: `anvil login` (device code), `anvil login --status`, `anvil ask`, a host
running `anvil bridge` that keeps working when the server stops trusting the token it holds (a
signing-key rollover and a restart: one 401, one silent refresh), then `anvil logout`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from security.calls import CLIENT_ID, TENANT, entra_env, new_id
from support.anvil_server import AnvilServer, free_port, run_anvil, stop
from support.entra_issuer import EntraIssuer, running_issuer
from support.entra_keys import signing_key
from support.preloaded_anvil import preloaded_anvil_command

pytestmark = pytest.mark.anyio

USER = "grace@contoso.example"
USER_CODE = re.compile(r"enter the code (\S+) to authenticate")
RUN_TIMEOUT = 60


@pytest.fixture(scope="module")
def issuer() -> Iterator[EntraIssuer]:
    with running_issuer(CLIENT_ID, tls=True) as running:
        yield running


class EntraServer:
    """`anvil serve` in Entra mode against the issuer, which can be restarted on its port."""

    def __init__(self, issuer: EntraIssuer, data_dir: Path, stack: ExitStack) -> None:
        self._env = entra_env(issuer, SSL_CERT_FILE=str(issuer.ca_file), ANVIL_PORT=str(free_port()))
        self._data_dir, self._stack = data_dir, stack
        self.running = self._start()

    def _start(self) -> AnvilServer:
        return self._stack.enter_context(run_anvil(self._data_dir, self._env))

    def restart(self) -> None:
        stop(self.running.process)
        self.running = self._start()


@pytest.fixture(scope="module")
def entra(issuer: EntraIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntraServer]:
    """One server for the module: the users of its tests are told apart by their own homes."""
    with ExitStack() as stack:
        yield EntraServer(issuer, tmp_path_factory.mktemp("entra-server"), stack)


#: What decides whether a web browser can be opened: left out, a terminal over SSH or in a container.
DISPLAY_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")

BROWSER = """\
import sys
from html.parser import HTMLParser

import httpx


class Form(HTMLParser):
    action = None
    fields = {}

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = attributes["action"]
        elif tag == "input" and attributes.get("name"):
            self.fields[attributes["name"]] = attributes.get("value") or ""


# The user's browser: the sign-in page signs them in at once and answers with a form that posts
# itself back to the command's listener, as Entra's form_post page does.
with httpx.Client(verify=sys.argv[1], trust_env=False, timeout=10) as browser:
    page = browser.get(sys.argv[2])
    form = Form()
    form.feed(page.text)
    browser.post(form.action, data=form.fields)
"""


def client_env(issuer: EntraIssuer, home: Path) -> dict[str, str]:
    """A user's environment without a display: their own home and token cache, MSAL trusting the
    issuer's CA."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_") and k not in DISPLAY_VARIABLES}
    return {
        **base,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "ANVIL_TOKEN_CACHE": str(home / "anvil-tokens.bin"),
        "REQUESTS_CA_BUNDLE": str(issuer.ca_file),
    }


def anvil(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`anvil ARGS`, a child of the preloaded interpreter (what is checked is what it does)."""
    return subprocess.run(
        [*preloaded_anvil_command(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def login(issuer: EntraIssuer, env: dict[str, str], url: str, oid: str) -> subprocess.CompletedProcess[str]:
    """`anvil login`, playing the user who reads the code it prints and enters it in a browser."""
    with subprocess.Popen(
        [*preloaded_anvil_command(), "login", "--url", url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stderr is not None
            prompt = process.stderr.readline()
            match = USER_CODE.search(prompt)
            assert match, prompt
            issuer.approve(match.group(1), oid=oid, username=USER)
            out, err = process.communicate(timeout=RUN_TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, out, prompt + err)


async def test_login_ask_bridge_through_a_key_rollover_and_logout(
    issuer: EntraIssuer, entra: EntraServer, tmp_path: Path
) -> None:
    env = client_env(issuer, tmp_path / "home")
    oid = new_id("")
    conversation = new_id("signed-in")
    server = entra.running
    signed_in = login(issuer, env, server.url, oid)
    assert signed_in.returncode == 0, signed_in.stderr
    assert signed_in.stdout == f"Signed in to {server.url} as {USER} (tenant {TENANT})\n"
    assert "To sign in, use a web browser to open the page" in signed_in.stderr
    assert (os.stat(env["ANVIL_TOKEN_CACHE"]).st_mode & 0o777) == 0o600

    status = anvil(env, "login", "--status", "--url", server.url)
    assert (status.returncode, status.stdout) == (0, signed_in.stdout)

    asked = anvil(env, "ask", "--url", server.url, "--conversation", conversation, "What is Anvil?")
    assert asked.returncode == 0, asked.stderr
    assert f"(conversation {conversation}, turn 1)" in asked.stdout

    command, *prefix = preloaded_anvil_command()
    host = StdioServerParameters(command=command, args=[*prefix, "bridge", "--url", server.mcp_url], env=env)
    with (tmp_path / "bridge.log").open("w") as errlog:
        async with Client(stdio_client(host, errlog=errlog), mode="auto") as bridged:  # type: ignore[arg-type]
            turn = await bridged.call_tool(
                "ask", {"question": "And its store?", "conversationId": conversation}
            )
            assert isinstance(turn.structured_content, dict) and turn.structured_content["turn"] == 2

            # Entra rolls its signing key over and the server restarts: the token the bridge
            # holds is refused once, MSAL refreshes it silently, and the host notices nothing.
            refreshes = issuer.refreshes
            issuer.publish(signing_key("entra-key-rolled"))
            entra.restart()
            turn = await bridged.call_tool(
                "ask", {"question": "Where is it kept?", "conversationId": conversation}
            )
            assert turn.is_error is False, turn.content
            assert isinstance(turn.structured_content, dict) and turn.structured_content["turn"] == 3
            assert issuer.refreshes == refreshes + 1

            signed_out = anvil(env, "logout", "--url", server.url)
            assert (signed_out.returncode, signed_out.stdout) == (
                0,
                f"Signed out of {server.url}: {USER}\n",
            )
            again = anvil(env, "logout", "--url", server.url)
            assert (again.returncode, again.stdout) == (0, f"No one was signed in to {server.url}\n")
            refused = anvil(env, "ask", "--url", server.url, "What now?")
            assert refused.returncode == 4 and refused.stdout == ""
            assert refused.stderr == (
                f"anvil: not signed in to {server.url}: run `anvil login --url {server.url}`\n"
            )
            status = anvil(env, "login", "--status", "--url", server.url)
            assert (status.returncode, status.stdout) == (1, f"Not signed in to {server.url}\n")


def test_where_a_browser_can_open_anvil_login_signs_in_there(
    issuer: EntraIssuer, entra: EntraServer, tmp_path: Path
) -> None:
    browser = tmp_path / "browser.py"
    browser.write_text(BROWSER)
    env = {
        **client_env(issuer, tmp_path / "home"),
        "DISPLAY": ":99",
        "BROWSER": f"{sys.executable} {browser} {issuer.ca_file} %s",
    }
    oid = new_id("")
    issuer.sign_in_as(oid=oid, username=USER)
    redemptions = issuer.authorization_code_redemptions
    server = entra.running
    signed_in = anvil(env, "login", "--url", server.url)
    status = anvil(env, "login", "--status", "--url", server.url)
    assert signed_in.returncode == 0, signed_in.stderr
    assert signed_in.stdout == f"Signed in to {server.url} as {USER} (tenant {TENANT})\n"
    assert signed_in.stderr == "signing in in your web browser...\n"
    assert issuer.authorization_code_redemptions == redemptions + 1
    assert (status.returncode, status.stdout) == (0, signed_in.stdout)
