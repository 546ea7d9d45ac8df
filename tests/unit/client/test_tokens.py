"""Which token the client commands send: given, `ANVIL_TOKEN`, none, or a dev token from the local
key (never creating one); and the user's sign-in for a server."""

from __future__ import annotations

import getpass
import socket
import subprocess
import sys
from pathlib import Path

import jwt
import pytest
from support.canned_http import Canned, canned_server

from app.client.errors import EXIT_UNREACHABLE, ServerUnreachable
from app.client.tokens import choose, is_loopback_url, local_user, sign_in_for
from app.devkey import DEV_AUTHORITY, DEV_CLIENT_ID, DEV_TENANT_ID, KEY_FILE_NAME, DevKey

DEV_DOCUMENT = {
    "resource": "http://127.0.0.1/mcp",
    "authorization_servers": [f"{DEV_AUTHORITY}/{DEV_TENANT_ID}/v2.0"],
    "scopes_supported": [f"api://{DEV_CLIENT_ID}/access_as_user"],
}
DEV_METADATA = {"/.well-known/oauth-protected-resource/mcp": Canned(200, DEV_DOCUMENT)}


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANVIL_TOKEN", raising=False)


def never(what: str) -> Path:
    raise AssertionError(f"{what} was not to be asked for")


def test_a_given_token_comes_first_then_anvil_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_TOKEN", "from-env")
    given = choose("http://127.0.0.1:1", "given", lambda: never("the data folder"))
    from_env = choose("http://127.0.0.1:1", None, lambda: never("the data folder"))
    assert given.source is not None and from_env.source is not None
    assert (given.source.get(True), given.source.renewable, given.hint) == (
        "given",
        False,
        "the token given was refused",
    )
    assert (from_env.source.get(False), from_env.hint) == ("from-env", "the token in ANVIL_TOKEN was refused")


def test_a_server_without_sign_in_gets_no_token() -> None:
    with canned_server() as server:
        choice = choose(server.url, None, lambda: never("the data folder"))
        assert sign_in_for(server.url) is None
    assert (choice.source, choice.hint, choice.sign_in) == (None, None, None)


def test_an_unreachable_server_gets_no_token_but_cannot_be_signed_in_to() -> None:
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{reserved.getsockname()[1]}"
    assert choose(url, None, lambda: never("the data folder")).source is None
    with pytest.raises(ServerUnreachable) as failed:
        sign_in_for(url)
    assert failed.value.exit_code == EXIT_UNREACHABLE


def test_a_local_dev_server_without_a_key_here_gets_no_token_and_no_key_is_made(tmp_path: Path) -> None:
    with canned_server(DEV_METADATA) as server:
        choice = choose(server.url, None, lambda: tmp_path / "data")
    assert choice.source is None
    assert choice.hint == f"no dev key in {(tmp_path / 'data').resolve()}, so no token was sent"
    assert not (tmp_path / "data").exists()


def test_a_local_dev_server_gets_a_dev_token_for_this_user_from_the_local_key(tmp_path: Path) -> None:
    key = DevKey.load_or_create(tmp_path)
    with canned_server(DEV_METADATA) as server:
        choice = choose(f"{server.url}/mcp", None, lambda: tmp_path)
    assert choice.source is not None and choice.source.renewable
    claims = jwt.decode(
        choice.source.get(False), key.public_key, algorithms=["RS256"], audience=DEV_CLIENT_ID
    )
    assert claims["name"] == local_user()
    assert choice.hint == f"sent a dev token for {local_user()!r} signed with the key in {tmp_path.resolve()}"


def test_an_unusable_local_key_is_the_hint(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE_NAME).write_text("not a key")
    with canned_server(DEV_METADATA) as server:
        choice = choose(server.url, None, lambda: tmp_path)
    assert choice.source is None
    assert choice.hint is not None and "is not an unencrypted PEM RSA private key" in choice.hint


@pytest.mark.parametrize(
    ("name", "expected"), [("ada", "ada"), ("DOMAIN\\ada b", "DOMAIN-ada-b"), ("", "anvil")]
)
def test_the_local_user_is_a_valid_dev_user_name(
    monkeypatch: pytest.MonkeyPatch, name: str, expected: str
) -> None:
    monkeypatch.setattr(getpass, "getuser", lambda: name)
    assert local_user() == expected


def test_loopback_urls() -> None:
    assert is_loopback_url("http://localhost:8000") and is_loopback_url("http://[::1]:8000/mcp")
    assert not is_loopback_url("https://anvil.example.com") and not is_loopback_url("http://[::1")


def test_choosing_a_token_for_a_server_without_sign_in_imports_neither_the_sdk_nor_msal() -> None:
    """`anvil ask` pays for what it uses: the MCP SDK is the bridge's, MSAL is Entra sign-in's."""
    probe = (
        "import sys\n"
        "from app.client.rest import ask\n"
        "from app.client.tokens import choose\n"
        "choose(sys.argv[1], None, lambda: None)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'mcp', 'msal', 'msal_extensions'}))\n"
    )
    with canned_server() as server:
        ran = subprocess.run(
            [sys.executable, "-c", probe, server.url], capture_output=True, text=True, timeout=60, check=True
        )
    assert ran.stdout.strip() == "[]", ran.stdout + ran.stderr
