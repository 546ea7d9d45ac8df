"""The retrieval engine's ranking: field weights, stemming, refusals and follow-up questions."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.exchange import Exchange
from support.retrieval import engine_of, engine_of_passages

from app.engines.retrieval.engine import NO_MATCH_ANSWER, RetrievalEngine, looks_like_follow_up
from app.knowledge.corpus import CorpusPassage
from app.knowledge.tokens import tokenize

pytestmark = pytest.mark.anyio

STORAGE = """---
title: Storage
---

Conversations are kept in a conversation store chosen at start-up.

## Cosmos DB

Cosmos DB keeps a conversation for thirty days. The retention is configured with
`ANVIL_COSMOS_TTL_DAYS`, and each user has a partition of their own.

## SQLite

SQLite keeps conversations in one local file. Old conversations are removed at expiry, which is
configured with `ANVIL_SQLITE_EXPIRY`.
"""

CLIENTS = """# Clients

## Retries

The client gives up after three attempts and waits a second between them.

## Logging

Every request is logged with its status. Failed requests are logged at warning level, including
those that were retried.
"""

TESTING = """# Testing

Use `TestClient` to call the application without a server.

```python
client = TestClient(app)
client.get("/")
```
"""

STATIC = """Serve a directory of images and stylesheets with the files application.
"""


@pytest.fixture
def engine(tmp_path: Path) -> RetrievalEngine:
    (tmp_path / "storage.md").write_text(STORAGE, encoding="utf-8")
    (tmp_path / "clients.md").write_text(CLIENTS, encoding="utf-8")
    (tmp_path / "testing.md").write_text(TESTING, encoding="utf-8")
    (tmp_path / "staticfiles.md").write_text(STATIC, encoding="utf-8")
    return engine_of(tmp_path)


async def test_a_heading_match_beats_a_body_mention(engine: RetrievalEngine) -> None:
    # "retried" appears in the Logging text; "Retries" is the other section's heading.
    results = await engine.search("retries", 5)

    assert [(p.source, p.heading) for p in results[:2]] == [
        ("clients.md", "Clients > Retries"),
        ("clients.md", "Clients > Logging"),
    ]


async def test_stemming_meets_other_forms_of_a_word(engine: RetrievalEngine) -> None:
    assert tokenize("configuring") == tokenize("configured") == tokenize("configures")

    results = await engine.search("configuring retention", 1)

    assert results[0].heading == "Storage > Cosmos DB"


async def test_front_matter_titles_root_the_heading_chain(engine: RetrievalEngine) -> None:
    results = await engine.search("conversation store start-up", 1)

    assert (results[0].source, results[0].heading) == ("storage.md", "Storage")
    assert "title:" not in results[0].text


async def test_identifiers_are_found_by_their_words(engine: RetrievalEngine) -> None:
    assert set(tokenize("TestClient")) == {"testclient", "test", "client"}

    results = await engine.search("test client application", 1)

    assert results[0].source == "testing.md"


async def test_a_glued_file_name_counts_as_its_words(engine: RetrievalEngine) -> None:
    results = await engine.search("static files", 1)

    assert results[0].source == "staticfiles.md"


async def test_urls_do_not_match_questions_about_http() -> None:
    engine = engine_of_passages(
        [
            CorpusPassage("a.md", "Links", "See [the guide](https://example.com/guide) for more."),
            CorpusPassage("b.md", "Redirects", "Plain http requests are redirected to https."),
        ]
    )

    results = await engine.search("https redirect", 5)

    assert [p.source for p in results] == ["b.md"]


@pytest.mark.parametrize(
    "question",
    [
        "What is the tallest mountain in Africa?",
        "How do I change a flat tyre on a bicycle?",
        "Suggest a vegetarian dinner for four people.",
    ],
)
async def test_an_off_topic_question_is_refused_without_sources(
    engine: RetrievalEngine, question: str
) -> None:
    history = [Exchange("How long does Cosmos DB keep a conversation?", "Thirty days.")]

    one_shot = await engine.answer(question, [])
    in_conversation = await engine.answer(question, history)

    assert one_shot.text == in_conversation.text == NO_MATCH_ANSWER
    assert one_shot.sources == in_conversation.sources == ()


async def test_a_follow_up_with_foreign_words_is_refused_too(engine: RetrievalEngine) -> None:
    history = [Exchange("How long does Cosmos DB keep a conversation?", "Thirty days.")]

    answer = await engine.answer("And what about volcanoes on Jupiter?", history)

    assert answer == type(answer)(text=NO_MATCH_ANSWER)


async def test_search_keeps_ranking_what_answer_would_refuse(engine: RetrievalEngine) -> None:
    question = "Which volcano on Jupiter erupted during the logging?"

    assert (await engine.answer(question, [])).text == NO_MATCH_ANSWER
    assert (await engine.search(question, 3))[0].heading == "Clients > Logging"


async def test_a_pronoun_follow_up_borrows_the_previous_subject(engine: RetrievalEngine) -> None:
    about_sqlite = [Exchange("How does SQLite keep conversations?", "In one file.")]
    about_cosmos = [Exchange("How does Cosmos DB keep conversations?", "Thirty days.")]

    sqlite = await engine.answer("Where is that configured?", about_sqlite)
    cosmos = await engine.answer("Where is that configured?", about_cosmos)

    assert sqlite.sources[0].heading == "Storage > SQLite"
    assert cosmos.sources[0].heading == "Storage > Cosmos DB"


async def test_an_elliptic_follow_up_borrows_the_previous_subject(engine: RetrievalEngine) -> None:
    history = [Exchange("How does SQLite keep conversations?", "In one file.")]

    answer = await engine.answer("And the expiry?", history)

    assert answer.sources[0].heading == "Storage > SQLite"


async def test_a_standalone_question_does_not_borrow(engine: RetrievalEngine) -> None:
    history = [Exchange("How does Cosmos DB keep conversations?", "Thirty days.")]
    question = "How many attempts does the client make before giving up?"

    in_conversation = await engine.answer(question, history)
    one_shot = await engine.answer(question, [])

    assert in_conversation == one_shot
    assert one_shot.sources[0].heading == "Clients > Retries"


def test_what_counts_as_a_follow_up() -> None:
    assert looks_like_follow_up("Can it serve an index page?")
    assert looks_like_follow_up("How do I test them?")
    assert looks_like_follow_up("And what about async tests?")
    assert looks_like_follow_up("What about SQLite?")
    assert looks_like_follow_up("Can I add more than one?")
    assert not looks_like_follow_up("How do I read settings from environment variables?")
    assert not looks_like_follow_up("What is the tallest mountain in Africa?")
