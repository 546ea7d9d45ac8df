"""Where to sign in: reading a server's RFC 9728 document (`app.client.discovery`), against a
real Anvil in Entra mode and against documents served by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from security.calls import CLIENT_ID, SCOPE, TENANT, ask_mcp, entra_env, new_id, tool_result
from support.anvil_server import AnvilServer, free_port, run_anvil
from support.entra_issuer import EntraIssuer, running_issuer
from support.sign_in import (
    API_SCOPE,
    USER,
    ApproverElsewhere,
    claims,
    msal_session,
)

from app.client.discovery import DEFAULT_CLIENT_ID, discover, metadata_urls
from app.client.errors import (
    DevServer,
    DiscoveryError,
    ServerUnreachable,
    SignInNotNeeded,
)
from app.client.signin import Account, UserSignIn

# --- discovery -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def entra_issuer() -> Iterator[EntraIssuer]:
    with running_issuer(CLIENT_ID, tls=True) as running:
        yield running


@pytest.fixture(scope="module")
def entra_server(
    entra_issuer: EntraIssuer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AnvilServer]:
    """`anvil serve` in Entra mode against the TLS issuer (trusting its CA for the key set)."""
    env = entra_env(entra_issuer, SSL_CERT_FILE=str(entra_issuer.ca_file))
    with run_anvil(tmp_path_factory.mktemp("entra-login"), env) as running:
        yield running


def test_discovery_reads_an_entra_server_at_its_mcp_url_or_base_url(
    entra_server: AnvilServer, entra_issuer: EntraIssuer, tmp_path: Path
) -> None:
    from_mcp_url = discover(entra_server.mcp_url)
    from_base_url = discover(entra_server.url, cache_path=tmp_path / "cache.bin", client_id="my-client")

    assert from_mcp_url.authority == f"{entra_issuer.authority}/{TENANT}"
    assert from_mcp_url.scopes == (API_SCOPE,)
    assert from_mcp_url.client_id == DEFAULT_CLIENT_ID == "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
    assert from_mcp_url.cache_path == tmp_path / "xdg" / "anvil" / "token-cache.bin"
    assert from_mcp_url.server_url == entra_server.mcp_url
    assert (from_base_url.authority, from_base_url.scopes) == (from_mcp_url.authority, from_mcp_url.scopes)
    assert (from_base_url.client_id, from_base_url.cache_path) == ("my-client", tmp_path / "cache.bin")


def test_device_code_sign_in_gives_a_token_the_server_accepts(
    entra_server: AnvilServer, entra_issuer: EntraIssuer, cache_path: Path
) -> None:
    settings = discover(entra_server.mcp_url, cache_path=cache_path)
    oid = new_id("")
    flows, polls = entra_issuer.device_flows_started, entra_issuer.device_code_polls
    approver = ApproverElsewhere(entra_issuer, oid=oid, username=USER)
    with msal_session(entra_issuer) as http:
        signin = UserSignIn(settings, http_client=http, encrypt=False)
        try:
            account = signin.login(prompt=approver)
        finally:
            approver.join()
        token = signin.token()

    assert account == Account(username=USER, oid=oid, tenant_id=TENANT)
    assert len(approver.messages) == 1
    assert approver.messages[0].startswith(
        f"To sign in, use a web browser to open the page {entra_issuer.authority}"
    )
    # One flow; polled while pending, then once more after the user signed in.
    assert (entra_issuer.device_flows_started - flows, entra_issuer.device_code_polls - polls) == (1, 2)
    token_claims = claims(token, entra_issuer)
    assert (token_claims["oid"], token_claims["scp"], token_claims["azp"]) == (oid, SCOPE, DEFAULT_CLIENT_ID)
    # The server takes the token as this user's: the conversation continues across two asks.
    conversation = new_id("login")
    tool_result(ask_mcp(entra_server, token, "first", conversation))
    second = tool_result(ask_mcp(entra_server, token, "second", conversation))["structuredContent"]
    assert (second["turn"], second["created"]) == (2, False)


def served(documents: dict[str, httpx.Response]) -> tuple[httpx.Client, list[str]]:
    """An HTTP client for `discover` answering from `documents` by URL (404 otherwise), and the
    list of URLs it was asked for."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        return documents.get(str(request.url), httpx.Response(404))

    return httpx.Client(transport=httpx.MockTransport(answer)), asked


ENTRA_DOCUMENT = {
    "resource": "https://anvil.contoso.example/mcp",
    "authorization_servers": [f"https://login.microsoftonline.com/{TENANT}/v2.0"],
    "scopes_supported": [API_SCOPE],
    "bearer_methods_supported": ["header"],
}


def test_discovery_reads_a_plain_document_at_the_path_aware_address_first() -> None:
    url = "https://anvil.contoso.example/mcp"
    client, asked = served(
        {
            "https://anvil.contoso.example/.well-known/oauth-protected-resource/mcp": httpx.Response(
                200, json=ENTRA_DOCUMENT
            )
        }
    )
    with client:
        settings = discover(url, http=client)

    assert settings.authority == f"https://login.microsoftonline.com/{TENANT}"
    assert settings.scopes == (API_SCOPE,)
    assert asked == ["https://anvil.contoso.example/.well-known/oauth-protected-resource/mcp"]


def test_discovery_falls_back_to_the_document_at_the_root() -> None:
    document = {**ENTRA_DOCUMENT, "scopes_supported": ["openid", API_SCOPE, "offline_access"]}
    client, asked = served(
        {
            "https://anvil.contoso.example/.well-known/oauth-protected-resource": httpx.Response(
                200, json=document
            )
        }
    )
    with client:
        settings = discover("https://anvil.contoso.example/gateway/mcp/", http=client)

    assert settings.scopes == (API_SCOPE,)
    assert asked == [
        "https://anvil.contoso.example/.well-known/oauth-protected-resource/gateway/mcp",
        "https://anvil.contoso.example/.well-known/oauth-protected-resource",
    ]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://host", "https://host/.well-known/oauth-protected-resource/mcp"),
        ("https://host/", "https://host/.well-known/oauth-protected-resource/mcp"),
        ("https://host:8443/mcp", "https://host:8443/.well-known/oauth-protected-resource/mcp"),
        (
            "http://127.0.0.1:8000/api/mcp",
            "http://127.0.0.1:8000/.well-known/oauth-protected-resource/api/mcp",
        ),
    ],
)
def test_metadata_addresses_are_path_aware(url: str, expected: str) -> None:
    assert metadata_urls(url)[0] == expected
    assert (
        metadata_urls(url)[1] == expected.split("/.well-known/")[0] + "/.well-known/oauth-protected-resource"
    )


def test_discovery_without_a_server_says_it_cannot_reach_it() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(ServerUnreachable) as raised:
        discover(url)
    assert str(raised.value).startswith(f"cannot reach {url}: ")
    assert "\n" not in str(raised.value)


def test_discovery_of_a_dev_server_points_at_anvil_token(dev_server: AnvilServer) -> None:
    with pytest.raises(DevServer) as raised:
        discover(dev_server.mcp_url)
    assert str(raised.value) == (
        f"{dev_server.mcp_url} is a local dev server: its tokens come from `anvil token` "
        "(run with the server's data folder), not from Entra sign-in"
    )


def test_discovery_of_a_server_without_sign_in_says_none_is_needed(anon_server: AnvilServer) -> None:
    with pytest.raises(SignInNotNeeded) as raised:
        discover(anon_server.url)
    assert str(raised.value).endswith("does not ask for sign-in: no sign-in is needed")
    assert str(raised.value).startswith(anon_server.url)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (httpx.Response(200, text="<html>"), "is not a protected resource document (not JSON)"),
        (httpx.Response(200, json=["x"]), "not a JSON object"),
        (httpx.Response(500, text="oops"), "answered HTTP 500"),
        (
            httpx.Response(200, json={**ENTRA_DOCUMENT, "authorization_servers": []}),
            "names no authorization server",
        ),
        (
            httpx.Response(
                200, json={**ENTRA_DOCUMENT, "authorization_servers": [f"http://127.0.0.1:1/{TENANT}/v2.0"]}
            ),
            "is not an https URL",
        ),
        (
            httpx.Response(200, json={**ENTRA_DOCUMENT, "authorization_servers": ["https://login.example/"]}),
            "names no tenant",
        ),
        (httpx.Response(200, json={**ENTRA_DOCUMENT, "scopes_supported": None}), "has no scopes_supported"),
        (httpx.Response(200, json={**ENTRA_DOCUMENT, "scopes_supported": ["openid"]}), "names no API scope"),
        (
            # Another API's token must never be what the user signs in for.
            httpx.Response(
                200, json={**ENTRA_DOCUMENT, "scopes_supported": ["https://graph.microsoft.com/.default"]}
            ),
            "are not scopes of one api:// API",
        ),
    ],
)
def test_discovery_refuses_an_unusable_document_in_one_line(answer: httpx.Response, message: str) -> None:
    document_url = "https://anvil.contoso.example/.well-known/oauth-protected-resource/mcp"
    client, _ = served({document_url: answer})
    with client, pytest.raises(DiscoveryError) as raised:
        discover("https://anvil.contoso.example/mcp", http=client)
    assert type(raised.value) is DiscoveryError
    assert str(raised.value).startswith(document_url)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
