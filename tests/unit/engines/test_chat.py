"""The language-model engine's own rules: prompt, history budget, citations, waits, credentials."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from support.exchange import Exchange
from support.knowledge import FixedKnowledge
from support.openai_server import FakeOpenAI, running_openai

from app.domain.ports import Passage
from app.engines.chat import (
    INSTRUCTIONS_HEADER,
    ChatEngine,
    ChatOptions,
    estimate_tokens,
    open_chat_engine,
    renumber_citations,
)
from app.settings import Settings

pytestmark = pytest.mark.anyio

PASSAGES = (
    Passage("a.md", "A", "Alpha text.", 3.0),
    Passage("b.md", "B", "Beta text.", 2.0),
    Passage("c.md", "C", "Gamma text.", 1.0),
)


def corpus() -> FixedKnowledge:
    return FixedKnowledge(PASSAGES)


def engine(history_tokens: int = 3000, client: openai.AsyncOpenAI | None = None) -> ChatEngine:
    client = client or openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
    return ChatEngine("openai", corpus(), client, ChatOptions(model="m", history_tokens=history_tokens))


def test_citations_are_renumbered_in_order_of_use_and_unknown_numbers_dropped() -> None:
    text, cited = renumber_citations("Gamma [3], alpha [1][3], nothing [9].", PASSAGES)
    assert text == "Gamma [1], alpha [2][1], nothing ."
    assert cited == (PASSAGES[2], PASSAGES[0])


def test_an_answer_without_citations_cites_nothing() -> None:
    assert renumber_citations("The documentation does not cover this.", PASSAGES) == (
        "The documentation does not cover this.",
        (),
    )


def test_instructions_join_the_system_prompt_and_one_shot_sends_no_history() -> None:
    messages, left_out = engine().prompt("Why?", [], "Be brief.", PASSAGES[:1])
    assert left_out == 0
    assert [m["role"] for m in messages] == ["system", "user"]
    assert str(messages[0]["content"]).endswith(f"{INSTRUCTIONS_HEADER}\nBe brief.")
    assert "[1] a.md (A)\nAlpha text." in str(messages[1]["content"])


def test_history_keeps_the_newest_turns_that_fit_the_budget() -> None:
    history = [Exchange(f"question {n} " + "x" * 400, f"answer {n} " + "y" * 400) for n in range(1, 6)]
    per_turn = estimate_tokens(history[0].question) + estimate_tokens(history[0].answer)
    messages, left_out = engine(history_tokens=per_turn * 2 + 1).prompt("Next?", history, None, PASSAGES)
    assert left_out == 3
    sent = [str(m["content"]) for m in messages[1:-1]]
    assert [s.split(" ", 2)[:2] for s in sent] == [
        ["question", "4"],
        ["answer", "4"],
        ["question", "5"],
        ["answer", "5"],
    ]


def test_a_zero_budget_sends_no_history() -> None:
    messages, left_out = engine(history_tokens=0).prompt("Next?", [Exchange("q", "a")], None, PASSAGES)
    assert left_out == 1 and len(messages) == 2


def test_a_prompt_without_passages_says_none_match() -> None:
    messages, _ = engine().prompt("Weather?", [], None, [])
    assert "none of the documentation matches" in str(messages[-1]["content"])


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with running_openai() as server:
        yield server


async def test_an_endpoint_without_a_key_gets_no_authorization_header(fake: FakeOpenAI) -> None:
    settings = Settings(answer_engine="openai", openai_base_url=f"{fake.url}/v1", openai_model="m")
    chat = open_chat_engine(settings, corpus())
    try:
        answer = await chat.answer("What is alpha?", [])
    finally:
        await chat.aclose()
    assert "authorization" not in fake.requests[-1].headers
    assert answer.sources == (PASSAGES[0],)


class FakeCredential:
    """Stands in for DefaultAzureCredential: hands out a fixed token, records scopes and closing."""

    instances: list[FakeCredential] = []  # noqa: RUF012 - shared record of instances made

    def __init__(self, **_: Any) -> None:
        self.scopes: list[str] = []
        self.closed = False
        FakeCredential.instances.append(self)

    async def get_token(self, *scopes: str, **_: Any) -> Any:
        from azure.core.credentials import AccessToken

        self.scopes.extend(scopes)
        return AccessToken("entra-token-for-model", int(time.time()) + 3600)

    async def close(self) -> None:
        self.closed = True


async def test_azure_without_a_key_signs_in_with_entra_and_closes_the_credential(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    import azure.identity.aio

    monkeypatch.setattr(azure.identity.aio, "DefaultAzureCredential", FakeCredential)
    settings = Settings(
        answer_engine="azure-openai", azure_openai_endpoint=fake.url, azure_openai_deployment="dep"
    )
    chat = open_chat_engine(settings, corpus())
    try:
        await chat.answer("What is alpha?", [])
    finally:
        await chat.aclose()
    request = fake.requests[-1]
    assert request.path == "/openai/deployments/dep/chat/completions"
    assert request.headers["authorization"] == "Bearer entra-token-for-model"
    credential = FakeCredential.instances[-1]
    assert credential.scopes == ["https://cognitiveservices.azure.com/.default"]
    assert credential.closed


def test_the_model_engines_need_their_settings() -> None:
    with pytest.raises(ValueError, match="ANVIL_OPENAI_MODEL"):
        Settings(answer_engine="openai")
    with pytest.raises(ValueError, match="ANVIL_AZURE_OPENAI_ENDPOINT and ANVIL_AZURE_OPENAI_DEPLOYMENT"):
        Settings(answer_engine="azure-openai")
    with pytest.raises(ValueError, match="absolute http"):
        Settings(answer_engine="openai", openai_model="m", openai_base_url="localhost:11434")
