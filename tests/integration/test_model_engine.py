"""The language-model engines through a real `anvil serve`, the real `openai` SDK, and a local
server speaking the OpenAI Chat Completions wire protocol (JSON and SSE, both URL shapes)."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.anvil_server import AnvilServer, run_anvil
from support.jsonrpc import MODERN, envelope, mcp_call, messages
from support.openai_server import NOT_COVERED, Failure, FakeOpenAI, Reply, Stall, running_openai

from app.stores.codec import from_document

API_KEY = "sk-local-test-key-4f1c9a7e"
AZURE_KEY = "azure-local-test-key-0b7d"

COSMOS = """---
title: Cosmos DB storage
---
# Cosmos DB

Conversations are kept in Cosmos DB for 30 days after their last turn. The time to live is
configured with ANVIL_HISTORY_TTL_SECONDS.
"""

SIGNIN = """# Sign-in

Anvil validates Microsoft Entra access tokens. The audience must be the API's client id.
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with running_openai() as server:
        yield server


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "cosmos.md").write_text(COSMOS, encoding="utf-8")
    (folder / "signin.md").write_text(SIGNIN, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI, corpus: Path) -> Iterator[AnvilServer]:
    env = {
        "ANVIL_ANSWER_ENGINE": "openai",
        "ANVIL_OPENAI_BASE_URL": f"{fake.url}/v1",
        "ANVIL_OPENAI_MODEL": "local-model",
        "ANVIL_OPENAI_API_KEY": API_KEY,
        "ANVIL_CORPUS_DIR": str(corpus),
        "ANVIL_ANSWER_TIMEOUT_SECONDS": "1",
        # Everything the SDKs log, to show the key is not among it.
        "ANVIL_LOG_LEVEL": "debug",
    }
    with run_anvil(tmp_path_factory.mktemp("openai"), env) as running:
        yield running


@pytest.fixture
def http(server: AnvilServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {server.token('alice')}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        yield client


def ask(http: httpx.Client, question: str, **arguments: Any) -> httpx.Response:
    return http.post("/api/ask", json={"question": question, **arguments})


def turns(http: httpx.Client, conversation_id: str) -> int | None:
    response = http.get(f"/api/conversations/{conversation_id}")
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    return len(response.json()["turns"])


def test_a_one_shot_prompt_holds_the_rules_the_numbered_passages_and_the_question(
    http: httpx.Client, fake: FakeOpenAI
) -> None:
    before = len(fake.requests)
    response = ask(http, "How long are conversations kept in Cosmos DB?")
    assert response.status_code == 200, response.text
    body = response.json()
    sent = fake.requests[before:]
    assert len(sent) == 1, "a one-shot question needs no query rewrite"
    request = sent[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == "local-model"
    system, question = request.messages
    assert system["role"] == "system" and "only from the numbered passages" in system["content"]
    assert question["role"] == "user"
    assert "[1] cosmos.md (Cosmos DB)" in question["content"]
    assert question["content"].endswith("Question: How long are conversations kept in Cosmos DB?")
    assert body["answer"] == "The documentation explains it [1]."
    assert [s["source"] for s in body["sources"]] == ["cosmos.md"]
    assert body["usage"] == {"inputTokens": 11, "outputTokens": 7}


def test_an_answer_that_cites_nothing_has_no_sources(http: httpx.Client, fake: FakeOpenAI) -> None:
    fake.script(Reply(NOT_COVERED))
    body = ask(http, "How long are conversations kept in Cosmos DB?").json()
    assert body["answer"] == NOT_COVERED
    assert body["sources"] == []


def test_turn_two_sees_turn_one_and_is_searched_as_a_standalone_query(
    http: httpx.Client, fake: FakeOpenAI
) -> None:
    conversation = f"model-{uuid.uuid4()}"
    first = ask(
        http,
        "How does sign-in work?",
        conversationId=conversation,
        instructions="Answer in one sentence for operators.",
    )
    assert first.status_code == 200, first.text
    turn_one = fake.answers()[-1]
    assert "Answer in one sentence for operators." in turn_one.messages[0]["content"]
    assert len(turn_one.messages) == 2, "turn 1 has no earlier turns to send"

    before = len(fake.requests)
    # The rewrite names what "they" are; the answer must then be grounded on the Cosmos passage.
    fake.script(Reply("Cosmos DB conversation time to live"))
    second = ask(http, "And how long are they kept?", conversationId=conversation)
    assert second.status_code == 200, second.text
    rewrite, answer = fake.requests[before:]
    assert rewrite.is_rewrite
    assert "How does sign-in work?" in rewrite.messages[-1]["content"]
    assert "And how long are they kept?" in rewrite.messages[-1]["content"]
    roles = [m["role"] for m in answer.messages]
    assert roles == ["system", "user", "assistant", "user"]
    assert "Answer in one sentence for operators." in answer.messages[0]["content"]
    assert answer.messages[1]["content"] == "How does sign-in work?"
    assert answer.messages[2]["content"] == first.json()["answer"]
    assert "[1] cosmos.md (Cosmos DB)" in answer.messages[3]["content"]
    body = second.json()
    assert body["turn"] == 2 and body["sources"][0]["source"] == "cosmos.md"
    # Both calls are counted: the rewrite's tokens and the answer's.
    assert body["usage"] == {"inputTokens": 22, "outputTokens": 14}
    # Each stored turn keeps what it cost.
    kept = http.get(f"/api/conversations/{conversation}").json()["turns"]
    assert [t["usage"] for t in kept] == [
        {"inputTokens": 11, "outputTokens": 7},
        {"inputTokens": 22, "outputTokens": 14},
    ]


def test_a_busy_model_is_a_quick_retry_later_with_its_own_wait_and_nothing_stored(
    http: httpx.Client, fake: FakeOpenAI
) -> None:
    conversation = f"busy-{uuid.uuid4()}"
    before = len(fake.requests)
    fake.script(Failure(429, {"Retry-After": "7"}))
    response = ask(http, "How long are conversations kept?", conversationId=conversation)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "7"
    assert response.headers["content-type"] == "application/problem+json"
    assert "busy; retry in 7 s" in response.json()["detail"]
    assert len(fake.requests) == before + 1, "the SDK must not retry inside the request"
    assert turns(http, conversation) is None

    fake.script(Failure(503, {"retry-after-ms": "2500"}))
    response = ask(http, "How long are conversations kept?", conversationId=conversation)
    assert response.status_code == 503 and response.headers["retry-after"] == "3"


def test_a_failing_model_stores_nothing_and_the_next_ask_continues(
    http: httpx.Client, fake: FakeOpenAI
) -> None:
    conversation = f"fail-{uuid.uuid4()}"
    assert ask(http, "How does sign-in work?", conversationId=conversation).status_code == 200
    fake.script(Failure(429, {"Retry-After": "1"}), Failure(500))
    for _ in range(2):
        # The 429 hits the query rewrite, the 500 the next turn's rewrite: both before any write.
        response = ask(http, "And what is its audience?", conversationId=conversation)
        assert response.status_code in (502, 503), response.text
    assert response.status_code == 502
    assert response.json()["type"].endswith("/engine-failed")
    assert "The language model failed (HTTP 500)" in response.json()["detail"]
    assert turns(http, conversation) == 1
    after = ask(http, "And what is its audience?", conversationId=conversation)
    assert after.status_code == 200 and after.json()["turn"] == 2


def test_a_model_that_does_not_answer_in_time_is_an_error_and_nothing_is_stored(
    http: httpx.Client, fake: FakeOpenAI
) -> None:
    conversation = f"slow-{uuid.uuid4()}"
    fake.script(Stall())
    response = ask(http, "How does sign-in work?", conversationId=conversation)
    assert response.status_code == 502
    assert "did not answer within 1 s" in response.json()["detail"]
    assert turns(http, conversation) is None
    assert ask(http, "How does sign-in work?", conversationId=conversation).json()["turn"] == 1


def test_a_model_failure_is_a_tool_error_over_mcp(server: AnvilServer, fake: FakeOpenAI) -> None:
    fake.script(Failure(429, {"Retry-After": "4"}))
    call = mcp_call(server, "ask", {"question": "How does sign-in work?"}, alice(server), version=MODERN)
    result = messages(call)[-1]["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == "The language model is busy; retry in 4 s."


def alice(server: AnvilServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.token('alice')}"}


@pytest.mark.parametrize("version", ["2025-06-18", "2026-07-28"])
def test_progress_notifications_arrive_before_the_result_when_asked_for(
    server: AnvilServer, fake: FakeOpenAI, version: str
) -> None:
    before = len(fake.requests)
    fake.script(Reply("Tokens are validated against Entra [1].", chunks=6))
    arguments = {"question": "How does sign-in work?"}
    call = mcp_call(
        server, "ask", arguments, alice(server), version=version, request_id=7, meta={"progressToken": "p-1"}
    )
    *notifications, last = messages(call)
    assert notifications, "a progress token must bring progress notifications"
    assert all(m["method"] == "notifications/progress" for m in notifications)
    assert all(m["params"]["progressToken"] == "p-1" for m in notifications)
    values = [m["params"]["progress"] for m in notifications]
    assert values == sorted(values) and len(set(values)) == len(values), "progress must rise"
    assert any(m["params"].get("message") == "Writing the answer" for m in notifications)
    assert last["id"] == 7
    assert last["result"]["structuredContent"]["answer"] == "Tokens are validated against Entra [1]."
    assert fake.requests[before].body.get("stream") is True


@pytest.mark.parametrize("version", ["2025-06-18", "2026-07-28"])
def test_without_a_progress_token_the_answer_is_one_json_document(
    server: AnvilServer, fake: FakeOpenAI, version: str
) -> None:
    before = len(fake.requests)
    (message,) = messages(
        mcp_call(server, "ask", {"question": "How does sign-in work?"}, alice(server), version=version)
    )
    assert message["result"]["isError"] is False
    assert not fake.requests[before].body.get("stream")


def test_the_key_never_appears_in_the_log(server: AnvilServer, http: httpx.Client, fake: FakeOpenAI) -> None:
    fake.script(Failure(401))
    response = ask(http, "How does sign-in work?")
    assert response.status_code == 502
    assert "refused Anvil's credentials" in response.json()["detail"]
    log = server.log()
    assert "openai" in log.lower(), "the debug log should show the model calls"
    assert API_KEY not in log


@pytest.fixture(scope="module")
def azure_server(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI, corpus: Path
) -> Iterator[AnvilServer]:
    env = {
        "ANVIL_ANSWER_ENGINE": "azure-openai",
        "ANVIL_AZURE_OPENAI_ENDPOINT": fake.url,
        "ANVIL_AZURE_OPENAI_DEPLOYMENT": "answers",
        "ANVIL_AZURE_OPENAI_API_KEY": AZURE_KEY,
        "ANVIL_CORPUS_DIR": str(corpus),
    }
    with run_anvil(tmp_path_factory.mktemp("azure"), env) as running:
        yield running


def test_azure_openai_uses_the_deployment_url_the_api_version_and_the_key(
    azure_server: AnvilServer, fake: FakeOpenAI
) -> None:
    before = len(fake.requests)
    token = azure_server.token("bob")
    response = httpx.post(
        f"{azure_server.url}/api/ask",
        json={"question": "How long are conversations kept in Cosmos DB?"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    (request,) = fake.requests[before:]
    assert request.path == "/openai/deployments/answers/chat/completions"
    assert request.query["api-version"] == "2024-10-21"
    assert request.headers["api-key"] == AZURE_KEY
    assert response.json()["sources"][0]["source"] == "cosmos.md"
    assert AZURE_KEY not in azure_server.log()


@pytest.mark.parametrize("version", ["2025-06-18", "2026-07-28"])
def test_a_client_that_goes_away_cancels_the_model_call(
    server: AnvilServer, fake: FakeOpenAI, version: str
) -> None:
    fake.disconnected.clear()
    fake.script(Reply("Tokens are validated against Entra [1].", hold=True))
    params = {"name": "ask", "arguments": {"question": "How does sign-in work?"}}
    call = envelope("tools/call", params, version=version, request_id=8, meta={"progressToken": "p-2"})
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", server.mcp_url, json=call.body, headers={**call.headers, **alice(server)}
        ) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if "Writing the answer" in line:
                break
    # The connection is closed: the model's stream must be abandoned, not read to the end.
    assert fake.disconnected.wait(timeout=20), "the model call went on after the client left"


def test_sigterm_lets_the_request_in_flight_finish_then_exits_cleanly(
    tmp_path: Path, fake: FakeOpenAI, corpus: Path
) -> None:
    env = {
        "ANVIL_ANSWER_ENGINE": "openai",
        "ANVIL_OPENAI_BASE_URL": f"{fake.url}/v1",
        "ANVIL_OPENAI_MODEL": "local-model",
        "ANVIL_CORPUS_DIR": str(corpus),
        "ANVIL_DRAIN_SECONDS": "20",
    }
    release = threading.Event()
    with run_anvil(tmp_path / "drain", env) as draining:
        token = draining.token("alice")
        fake.arrived.clear()
        fake.script(Reply("Finished after the signal [1].", release=release))
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            in_flight = pool.submit(
                httpx.post,
                f"{draining.url}/api/ask",
                json={"question": "How does sign-in work?", "conversationId": "drained"},
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            assert fake.arrived.wait(timeout=20), "the ask never reached the model"
            draining.process.send_signal(signal.SIGTERM)
            # The model answers only now: the request must still complete, and be stored.
            release.set()
            response = in_flight.result(timeout=30)
        assert response.status_code == 200, response.text
        assert response.json()["answer"] == "Finished after the signal [1]."
        assert draining.process.wait(timeout=30) == 0
    # What the server left in its database once it had exited.
    with closing(sqlite3.connect(draining.data_dir / "conversations.sqlite3")) as db:
        rows = db.execute("SELECT document FROM conversations WHERE conversation_id = 'drained'").fetchall()
    (stored,) = [from_document(json.loads(document)) for (document,) in rows]
    assert [t.answer for t in stored.turns] == ["Finished after the signal [1]."]
