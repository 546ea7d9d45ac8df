"""The language-model engine grounded on hybrid results: the passages numbered in its prompt, and
those its standalone query for a follow-up finds, are ranked by words and meaning (the real local
model over a corpus this test writes, and the real `openai` SDK against a local server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.exchange import Exchange
from support.openai_server import FakeOpenAI, Reply, running_openai
from support.retrieval import engine_of

from app.engines.chat import open_chat_engine
from app.engines.embeddings.local import LocalEmbedder
from app.engines.retrieval.engine import RetrievalEngine
from app.settings import Settings

pytestmark = pytest.mark.anyio

PAGES = {
    "hooks.md": "# Event hooks\n\nRegister a callable with `add_hook` and Tern invokes it for every request "
    "it sends and every response it receives.\n",
    "limits.md": "# Resource limits\n\nSet `max_connections` to cap how many sockets Tern keeps open.\n",
    "install.md": "# Installing Tern\n\nInstall Tern with pip into a virtual environment.\n",
}
#: Shares no informative word with the hooks page.
PARAPHRASE = "How can my own function run on each outgoing call and each reply?"


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RetrievalEngine, RetrievalEngine]]:
    folder = tmp_path_factory.mktemp("tern")
    for name, text in PAGES.items():
        (folder / name).write_text(text, encoding="utf-8")
    embedder = LocalEmbedder()
    hybrid = engine_of(folder, tmp_path_factory.mktemp("cache"), embedder=embedder)
    yield hybrid, RetrievalEngine(hybrid.index, embedder, ranking="lexical")
    hybrid.index.close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with running_openai() as server:
        yield server


def numbered(prompt: str) -> list[str]:
    """The sources of the passages a prompt numbers, in order."""
    return [line.split(" ", 2)[1] for line in prompt.splitlines() if line.startswith("[") and "] " in line]


async def test_the_prompt_is_grounded_on_hybrid_results(
    corpora: tuple[RetrievalEngine, RetrievalEngine], fake: FakeOpenAI
) -> None:
    hybrid, lexical = corpora
    settings = Settings(
        answer_engine="openai", openai_base_url=f"{fake.url}/v1", openai_model="m", answer_passages=1
    )
    for corpus, grounded in ((hybrid, True), (lexical, False)):
        chat = open_chat_engine(settings, corpus)
        try:
            answer = await chat.answer(PARAPHRASE, [])
        finally:
            await chat.aclose()
        prompt = str(fake.requests[-1].messages[-1]["content"])
        assert (numbered(prompt) == ["hooks.md"]) is grounded, prompt
        assert ([source.source for source in answer.sources] == ["hooks.md"]) is grounded


async def test_the_standalone_query_of_a_follow_up_is_ranked_by_meaning_too(
    corpora: tuple[RetrievalEngine, RetrievalEngine], fake: FakeOpenAI
) -> None:
    hybrid, _ = corpora
    settings = Settings(
        answer_engine="openai", openai_base_url=f"{fake.url}/v1", openai_model="m", answer_passages=1
    )
    # The model rewrites "and can I see them?" into a query that shares no word with the page.
    fake.script(Reply(PARAPHRASE), Reply("It is described there [1]."))
    chat = open_chat_engine(settings, hybrid)
    try:
        answer = await chat.answer("And can I see them?", [Exchange("How do I install Tern?", "With pip.")])
    finally:
        await chat.aclose()
    rewrite, final = fake.requests[-2:]
    assert rewrite.is_rewrite
    assert numbered(str(final.messages[-1]["content"])) == ["hooks.md"]
    assert [source.source for source in answer.sources] == ["hooks.md"]
