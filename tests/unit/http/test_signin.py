"""BearerAuthMiddleware: 401/403 with the right WWW-Authenticate, the verified caller, no token leaks."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth.dev import DEV_SCOPE, DEV_TENANT_ID, DevIssuer, user_oid
from app.domain.ask import AskService
from app.domain.lifecycle import ConversationService
from app.domain.ports import Verifier
from app.domain.principal import Principal
from app.errors import Unavailable
from app.http.signin import BearerAuthMiddleware, principal_of
from app.runtime import Runtime

pytestmark = pytest.mark.anyio

METADATA_URL = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
OTHER_TENANT = "22222222-2222-4222-8222-222222222222"


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> DevIssuer:
    """One issuer per module: RSA key generation is slow."""
    return DevIssuer.load_or_create(tmp_path_factory.mktemp("dev-key"))


@pytest.fixture(scope="module")
def other_issuer(tmp_path_factory: pytest.TempPathFactory) -> DevIssuer:
    """An issuer with a different key but the same kid: its tokens must not verify."""
    return DevIssuer.load_or_create(tmp_path_factory.mktemp("other-key"))


async def principal_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Reports who the middleware says is calling."""
    principal = principal_of(scope)
    payload = None if principal is None else {"oid": principal.oid, "tid": principal.tid}
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps({"principal": payload}).encode()})


def signed_in(verifier: Verifier | None, tmp_path: Path) -> ASGIApp:
    """The middleware in front of `principal_app`, with a runtime holding `verifier` in the
    lifespan state of every request."""
    runtime = Runtime(
        # The middleware reads only the verifier.
        service=cast(AskService, object()),
        conversations=cast(ConversationService, object()),
        verifier=verifier,
    )
    app = BearerAuthMiddleware(principal_app, resource_metadata_url=METADATA_URL)

    async def with_state(scope: Scope, receive: Receive, send: Send) -> None:
        await app({**scope, "state": {"runtime": runtime}}, receive, send)

    return with_state


@pytest.fixture
async def http(issuer: DevIssuer, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = signed_in(issuer.verifier(), tmp_path)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
    ) as client:
        yield client


def assert_no_leak(response: httpx.Response, token: str) -> None:
    """The token (or any long piece of it) appears in no header and not in the body."""
    texts = [response.text, *(f"{name}: {value}" for name, value in response.headers.multi_items())]
    for part in filter(None, token.split(".")):
        for text in texts:
            assert part not in text
    for text in texts:
        assert token not in text


def assert_refused(response: httpx.Response, status: int) -> str:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == status
    assert "principal" not in response.json()
    return response.headers["www-authenticate"]


# --- 401 without a usable token ----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/mcp", "/api/ask", "/api/conversations"])
async def test_no_authorization_gets_401_naming_the_metadata_only(http: httpx.AsyncClient, path: str) -> None:
    response = await http.post(path)

    challenge = assert_refused(response, 401)
    assert challenge == f'Bearer resource_metadata="{METADATA_URL}"'
    assert "error=" not in challenge


async def test_bad_token_gets_401_invalid_token(http: httpx.AsyncClient) -> None:
    token = "not-a-jwt-but-a-secret-looking-string"

    response = await http.post("/mcp", headers={"Authorization": f"Bearer {token}"})

    challenge = assert_refused(response, 401)
    assert challenge.startswith(f'Bearer resource_metadata="{METADATA_URL}", ')
    assert 'error="invalid_token"' in challenge
    assert "error_description=" in challenge
    assert_no_leak(response, token)


async def test_token_signed_by_another_key_gets_401(http: httpx.AsyncClient, other_issuer: DevIssuer) -> None:
    token = other_issuer.mint("alice")

    response = await http.post("/mcp", headers={"Authorization": f"Bearer {token}"})

    assert 'error="invalid_token"' in assert_refused(response, 401)
    assert_no_leak(response, token)


async def test_expired_token_gets_401(http: httpx.AsyncClient, issuer: DevIssuer) -> None:
    token = issuer.mint("alice", ttl=60, now=time.time() - 7200)

    response = await http.post("/mcp", headers={"Authorization": f"Bearer {token}"})

    assert 'error="invalid_token"' in assert_refused(response, 401)
    assert_no_leak(response, token)


async def test_basic_scheme_gets_401_invalid_token(http: httpx.AsyncClient) -> None:
    response = await http.post("/mcp", headers={"Authorization": "Basic abc"})

    challenge = assert_refused(response, 401)
    assert 'error="invalid_token"' in challenge
    assert "abc" not in challenge
    assert "abc" not in response.text


async def test_valid_token_under_another_scheme_is_refused(
    http: httpx.AsyncClient, issuer: DevIssuer
) -> None:
    token = issuer.mint("alice")

    response = await http.post("/mcp", headers={"Authorization": f"Token {token}"})

    assert 'error="invalid_token"' in assert_refused(response, 401)
    assert_no_leak(response, token)


@pytest.mark.parametrize("header", ["Bearer ", "Bearer", "Bearer    "])
async def test_empty_bearer_token_gets_401(http: httpx.AsyncClient, header: str) -> None:
    response = await http.post("/mcp", headers={"Authorization": header})

    challenge = assert_refused(response, 401)
    assert 'error="invalid_token"' in challenge


async def test_token_in_the_query_string_only_is_not_accepted(
    http: httpx.AsyncClient, issuer: DevIssuer
) -> None:
    token = issuer.mint("alice")

    response = await http.post("/mcp", params={"access_token": token})

    challenge = assert_refused(response, 401)
    assert challenge == f'Bearer resource_metadata="{METADATA_URL}"'
    assert_no_leak(response, token)


# --- 403 without the scope ---------------------------------------------------------------------


async def test_token_without_the_scope_gets_403_insufficient_scope(
    http: httpx.AsyncClient, issuer: DevIssuer
) -> None:
    token = issuer.mint("alice", scopes=("something_else",))

    response = await http.post("/api/ask", headers={"Authorization": f"Bearer {token}"})

    challenge = assert_refused(response, 403)
    assert 'error="insufficient_scope"' in challenge
    assert f'scope="{DEV_SCOPE}"' in challenge
    assert f'resource_metadata="{METADATA_URL}"' in challenge
    assert_no_leak(response, token)


# --- accepted ----------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_valid_token_passes_the_principal_to_the_app(
    http: httpx.AsyncClient, issuer: DevIssuer, scheme: str
) -> None:
    token = issuer.mint("alice")

    response = await http.post("/mcp", headers={"Authorization": f"{scheme} {token}"})

    assert response.status_code == 200
    assert response.json() == {"principal": {"oid": user_oid("alice"), "tid": DEV_TENANT_ID}}
    assert_no_leak(response, token)


async def test_principal_carries_the_tokens_tenant(http: httpx.AsyncClient, issuer: DevIssuer) -> None:
    token = issuer.mint("bob", tenant=OTHER_TENANT)

    response = await http.get("/api/conversations", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200
    assert response.json() == {"principal": {"oid": user_oid("bob"), "tid": OTHER_TENANT}}


@pytest.mark.parametrize(
    "path", ["/healthz", "/readyz", "/.well-known/oauth-protected-resource/mcp", "/openapi.json"]
)
async def test_unprotected_paths_pass_without_a_token(http: httpx.AsyncClient, path: str) -> None:
    response = await http.get(path)

    assert response.status_code == 200
    assert response.json() == {"principal": None}
    assert "www-authenticate" not in response.headers


async def test_unprotected_paths_ignore_a_bad_token(http: httpx.AsyncClient) -> None:
    response = await http.get("/healthz", headers={"Authorization": "Bearer garbage"})

    assert response.status_code == 200
    assert response.json() == {"principal": None}


async def test_without_a_verifier_every_caller_is_anonymous(tmp_path: Path) -> None:
    app = signed_in(None, tmp_path)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
    ) as client:
        without = await client.post("/mcp")
        with_garbage = await client.post("/api/ask", headers={"Authorization": "Bearer garbage"})

    for response in (without, with_garbage):
        assert response.status_code == 200
        assert response.json() == {"principal": None}
        assert "www-authenticate" not in response.headers


class UnreachableKeys:
    """A verifier whose key source cannot be reached (Entra down before any key was loaded)."""

    async def verify(self, token: str) -> Principal:
        raise Unavailable(
            "The signing keys to check access tokens cannot be loaded right now.", retry_after=7.2
        )


async def test_a_key_source_outage_is_a_retryable_503_not_a_sign_in_prompt(tmp_path: Path) -> None:
    app = signed_in(UnreachableKeys(), tmp_path)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
    ) as client:
        response = await client.post("/mcp", headers={"Authorization": "Bearer some.token.here"})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "8"
    assert "www-authenticate" not in response.headers
    assert "cannot be loaded" in response.json()["detail"]


async def test_the_log_names_the_real_cause_no_token_or_a_token_refused(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="app.http.signin")
    await http.post("/mcp")
    await http.post("/mcp", headers={"Authorization": "Bearer not-a-jwt"})
    said = [r.getMessage() for r in caplog.records if r.name == "app.http.signin"]
    assert said == [
        "refused a request with no token: sign-in required",
        "refused a request whose token did not sign in: invalid_token",
    ]
