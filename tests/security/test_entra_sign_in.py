"""Signed-in callers: v1 and v2 tokens, users kept apart, the sign-in metadata, request bounds."""

from __future__ import annotations

import httpx
import pytest
from support.anvil_server import AnvilServer
from support.entra_issuer import EntraIssuer
from support.jsonrpc import mcp_call

from .calls import (
    CLIENT_ID,
    METADATA_URL,
    PUBLIC_URL,
    SCOPE,
    TENANT,
    ask_mcp,
    ask_rest,
    bearer,
    new_id,
    rows_for,
    stored_rows,
    tool_result,
)


def test_v2_and_v1_tokens_of_one_user_continue_one_conversation(
    server: AnvilServer, issuer: EntraIssuer
) -> None:
    oid, conversation_id = new_id(""), new_id("versions")
    v2 = issuer.mint_v2(oid=oid, tid=TENANT)
    v1 = issuer.mint_v1(oid=oid, tid=TENANT)
    assert issuer.claims_v1(oid=oid, tid=TENANT)["iss"] == f"https://sts.windows.net/{TENANT}/"

    first = tool_result(ask_mcp(server, v2, "first via v2", conversation_id))["structuredContent"]
    second = tool_result(ask_mcp(server, v1, "second via v1", conversation_id))["structuredContent"]

    assert (first["turn"], first["created"]) == (1, True)
    assert (second["turn"], second["created"]) == (2, False)
    assert second["answer"] == "Echo: second via v1 (turn 2; previous question: first via v2)"
    assert rows_for(server.data_dir, conversation_id) == 1


def test_rest_accepts_a_v1_token_too(server: AnvilServer, issuer: EntraIssuer) -> None:
    response = ask_rest(server, issuer.mint_v1(oid=new_id(""), tid=TENANT), "hello")
    assert response.status_code == 200, response.text
    assert response.json()["answer"] == "Echo: hello"


def test_another_user_with_the_same_conversation_id_starts_fresh_over_mcp(
    server: AnvilServer, issuer: EntraIssuer
) -> None:
    alice = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    bob = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    shared = new_id("shared")
    tool_result(ask_mcp(server, alice, "alice secret one", shared))
    tool_result(ask_mcp(server, alice, "alice secret two", shared))

    bob_first = tool_result(ask_mcp(server, bob, "bob asks", shared))["structuredContent"]
    bob_second = tool_result(ask_mcp(server, bob, "bob again", shared))["structuredContent"]
    alice_third = tool_result(ask_mcp(server, alice, "alice three", shared))["structuredContent"]

    assert (bob_first["turn"], bob_first["created"]) == (1, True)
    assert bob_first["answer"] == "Echo: bob asks"
    assert bob_second["answer"] == "Echo: bob again (turn 2; previous question: bob asks)"
    assert "alice" not in bob_first["answer"] + bob_second["answer"]
    assert alice_third["answer"] == "Echo: alice three (turn 3; previous question: alice secret two)"
    # One conversation each, under each user's own key.
    assert rows_for(server.data_dir, shared) == 2


def test_another_user_with_the_same_conversation_id_starts_fresh_over_rest(
    server: AnvilServer, issuer: EntraIssuer
) -> None:
    alice = issuer.mint_v1(oid=new_id(""), tid=TENANT)
    bob = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    shared = new_id("shared-rest")
    assert ask_rest(server, alice, "alice private", shared).status_code == 200

    bob_answer = ask_rest(server, bob, "bob here", shared)
    alice_answer = ask_rest(server, alice, "alice again", shared)

    assert bob_answer.status_code == 200
    assert (bob_answer.json()["turn"], bob_answer.json()["answer"]) == (1, "Echo: bob here")
    assert alice_answer.json()["answer"] == "Echo: alice again (turn 2; previous question: alice private)"


@pytest.mark.parametrize(
    "path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]
)
def test_the_protected_resource_metadata_is_anonymous_and_names_entra(
    server: AnvilServer, issuer: EntraIssuer, path: str
) -> None:
    response = httpx.get(server.url + path)
    assert response.status_code == 200
    document = response.json()
    assert document["resource"] == f"{PUBLIC_URL}/mcp"
    assert document["authorization_servers"] == [f"{issuer.authority}/{TENANT}/v2.0"]
    assert document["scopes_supported"] == [f"api://{CLIENT_ID}/{SCOPE}"]
    assert document["bearer_methods_supported"] == ["header"]


def test_a_client_finds_entra_from_the_401_challenge(server: AnvilServer, issuer: EntraIssuer) -> None:
    """What VS Code does: 401 -> resource metadata -> the authorization server's OpenID configuration."""
    challenge = mcp_call(server, "ask", {"question": "hi"}, {})
    assert challenge.status_code == 401
    assert challenge.headers["www-authenticate"] == f'Bearer resource_metadata="{METADATA_URL}"'

    # The public URL is not reachable from the test; the same document is served locally.
    metadata = httpx.get(METADATA_URL.replace(PUBLIC_URL, server.url)).json()
    authorization_server = metadata["authorization_servers"][0]
    openid = httpx.get(f"{authorization_server}/.well-known/openid-configuration").json()

    assert openid["issuer"] == authorization_server
    token = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    assert tool_result(mcp_call(server, "ask", {"question": "hi"}, bearer(token)))["isError"] is False


@pytest.mark.parametrize("signed_in", [True, False])
def test_a_body_over_64_kib_is_413_before_anything_reads_it(
    server: AnvilServer, issuer: EntraIssuer, signed_in: bool
) -> None:
    conversation_id = new_id("big")
    headers = bearer(issuer.mint_v2(oid=new_id(""), tid=TENANT)) if signed_in else {}
    before = stored_rows(server.data_dir)

    response = mcp_call(server, "ask", {"question": "x" * 70_000, "conversationId": conversation_id}, headers)
    rest = httpx.post(
        f"{server.url}/api/ask",
        json={"question": "y" * 70_000, "conversationId": conversation_id},
        headers=headers,
    )

    assert (response.status_code, rest.status_code) == (413, 413)
    assert stored_rows(server.data_dir) == before


def test_an_overlong_question_is_a_tool_error_and_stores_nothing(
    server: AnvilServer, issuer: EntraIssuer
) -> None:
    conversation_id = new_id("long")
    token = issuer.mint_v2(oid=new_id(""), tid=TENANT)

    result = tool_result(
        mcp_call(server, "ask", {"question": "q" * 8001, "conversationId": conversation_id}, bearer(token))
    )
    rest = ask_rest(server, token, "q" * 8001, conversation_id)

    assert result["isError"] is True
    assert "question is 8001 characters long, more than the 8000" in result["content"][0]["text"]
    assert rest.status_code == 400
    assert rows_for(server.data_dir, conversation_id) == 0


def test_another_users_conversation_cannot_be_read_listed_or_deleted(
    server: AnvilServer, issuer: EntraIssuer
) -> None:
    alice = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    bob = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    mine, never = new_id("alices"), new_id("never")
    tool_result(ask_mcp(server, alice, "alice's private question", mine))
    base = f"{server.url}/api/conversations"

    read = httpx.get(f"{base}/{mine}", headers=bearer(bob))
    missing = httpx.get(f"{base}/{never}", headers=bearer(bob))
    listed = httpx.get(base, headers=bearer(bob))
    deleted = httpx.delete(f"{base}/{mine}", headers=bearer(bob))
    deleted_all = httpx.delete(base, headers=bearer(bob))
    over_mcp = tool_result(mcp_call(server, "get_conversation", {"conversationId": mine}, bearer(bob)))

    assert read.status_code == missing.status_code == 404
    assert read.json()["detail"].replace(mine, "X") == missing.json()["detail"].replace(never, "X")
    assert mine not in listed.text
    assert deleted.json() == {"deleted": False} and deleted_all.json() == {"deleted": 0}
    assert over_mcp["isError"] is True and "not found" in over_mcp["content"][0]["text"]
    still = httpx.get(f"{base}/{mine}", headers=bearer(alice)).json()
    assert [t["question"] for t in still["turns"]] == ["alice's private question"]
