"""The BM25 retrieval engine: ranking, cited answers and follow-up questions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.exchange import Exchange
from support.retrieval import engine_of, engine_of_passages

from app.domain.ports import AnswerEngine
from app.engines.retrieval.engine import (
    MAX_ANSWER_CHARS,
    NO_MATCH_ANSWER,
    RetrievalEngine,
    looks_like_follow_up,
    tokenize,
)
from app.knowledge.corpus import CorpusPassage

pytestmark = pytest.mark.anyio

STORAGE = """# Storage

Anvil keeps every conversation in a conversation store.

## Cosmos DB

Cosmos DB keeps a conversation for 30 days. The TTL is configured with ANVIL_COSMOS_TTL_DAYS.
Each user has a partition of their own.
"""

SQLITE = """# SQLite

## Expiry

Old conversations are removed at expiry. Expiry is configured with ANVIL_SQLITE_EXPIRY;
configure it before start-up.
"""

CONFIG = """# Configuration

## Settings

Every setting is read from an environment variable with the ANVIL_ prefix.

## Logging

Logs are written as JSON lines to standard output.
"""


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    (tmp_path / "backends").mkdir()
    (tmp_path / "storage.md").write_text(STORAGE, encoding="utf-8")
    (tmp_path / "backends" / "sqlite.md").write_text(SQLITE, encoding="utf-8")
    (tmp_path / "config.md").write_text(CONFIG, encoding="utf-8")
    return tmp_path


@pytest.fixture
def engine(corpus: Path) -> RetrievalEngine:
    return engine_of(corpus)


def test_index_and_queries_share_one_tokeniser() -> None:
    assert tokenize("How is it Configured?") == tokenize("configure") == tokenize("configuring")
    assert tokenize("The settings, and THE setting") == ["set", "set"]
    assert tokenize("policies caches stopped") == tokenize("policy cache stop")
    assert tokenize("a the of and it") == []


def test_engine_satisfies_the_protocol(engine: RetrievalEngine) -> None:
    as_port: AnswerEngine = engine
    assert as_port.name == "retrieval"
    assert engine.passage_count == 5


async def test_search_ranks_the_matching_passage_first_with_relative_sources(engine: RetrievalEngine) -> None:
    results = await engine.search("JSON logs", 5)

    assert results[0].source == "config.md"
    assert results[0].heading == "Configuration > Logging"
    assert results[0].text == "Logs are written as JSON lines to standard output."
    assert all(p.score > 0 for p in results)
    assert [p.score for p in results] == sorted((p.score for p in results), reverse=True)


async def test_search_finds_nested_files_by_forward_slash_path(engine: RetrievalEngine) -> None:
    results = await engine.search("expiry", 1)

    assert [(p.source, p.heading) for p in results] == [("backends/sqlite.md", "SQLite > Expiry")]


async def test_heading_words_count(engine: RetrievalEngine) -> None:
    # "Partition" is in the text, "Cosmos" in the heading: the passage needs both to win.
    results = await engine.search("cosmos partition", 5)

    assert results[0].heading == "Storage > Cosmos DB"


async def test_search_respects_max_results(engine: RetrievalEngine) -> None:
    assert len(await engine.search("conversation", 1)) == 1
    assert len(await engine.search("conversation", 2)) == 2
    assert await engine.search("conversation", 0) == []


async def test_search_returns_nothing_for_empty_or_unknown_queries(engine: RetrievalEngine) -> None:
    assert await engine.search("", 5) == []
    assert await engine.search("the and of", 5) == []
    assert await engine.search("kubernetes helm", 5) == []


async def test_answer_quotes_the_section_that_answers_under_its_title_and_heading(
    engine: RetrievalEngine,
) -> None:
    answer = await engine.answer("How is the Cosmos TTL configured?", [])

    # The passage whole: it fits, and it is the answer's own words, labelled with where it is.
    assert answer.text.startswith(
        "**Storage > Cosmos DB** (`storage.md`)\n\n"
        "Cosmos DB keeps a conversation for 30 days. The TTL is configured with ANVIL_COSMOS_TTL_DAYS.\n"
        "Each user has a partition of their own."
    )
    assert answer.sources[0].heading == "Storage > Cosmos DB"


async def test_answer_quotes_up_to_three_pages_that_score_close_to_the_best() -> None:
    passages = [
        CorpusPassage("a.md", "Expiry", "Conversations expire after thirty days of silence."),
        CorpusPassage("b.md", "Expiry settings", "The expiry of conversations is set in days."),
        CorpusPassage("c.md", "Expiry in SQLite", "SQLite removes expired conversations hourly."),
        CorpusPassage("d.md", "Expiry in Cosmos DB", "Cosmos DB removes expired conversations itself."),
    ]
    answer = await engine_of_passages(passages).answer("When do conversations expire?", [])

    assert answer.text.startswith("**Expiry** (`a.md`)\n\nConversations expire after thirty days")
    assert len(answer.sources) == 3
    assert len({p.source for p in answer.sources}) == 3
    for passage in answer.sources:
        assert f"(`{passage.source}`)\n\n{passage.text}" in answer.text


async def test_more_pieces_of_the_section_quoted_go_under_its_one_heading() -> None:
    passages = [
        CorpusPassage("a.md", "Tuning", "Tuning the cache size helps."),
        CorpusPassage("a.md", "Tuning", "More about cache tuning."),
        CorpusPassage("b.md", "Cache", "The cache is shared."),
    ]
    answer = await engine_of_passages(passages).answer("cache tuning", [])

    assert [(p.source, p.heading) for p in answer.sources] == [("a.md", "Tuning"), ("b.md", "Cache")]
    assert answer.text.count("**Tuning**") == 1
    assert "Tuning the cache size helps.\n\nMore about cache tuning." in answer.text


async def test_follow_up_borrows_the_previous_question(engine: RetrievalEngine) -> None:
    history = [Exchange("How long does Cosmos DB keep a conversation?", "30 days.")]

    with_history = await engine.answer("and how is it configured?", history)
    without_history = await engine.answer("and how is it configured?", [])

    assert with_history.sources[0].heading == "Storage > Cosmos DB"
    assert without_history.sources[0].heading != "Storage > Cosmos DB"


async def test_a_standalone_question_ignores_history(engine: RetrievalEngine) -> None:
    history = [Exchange("How long does Cosmos DB keep a conversation?", "30 days.")]

    answer = await engine.answer("Where are logs written as JSON lines?", history)

    assert answer.sources[0].heading == "Configuration > Logging"


def test_follow_up_detection() -> None:
    assert looks_like_follow_up("and how is it configured?")
    assert looks_like_follow_up("What about SQLite?")
    assert looks_like_follow_up("Also for container partitions with throughput limits please")
    assert looks_like_follow_up("Does the partition key change when those users move region?")
    assert not looks_like_follow_up("How long does Cosmos DB keep a conversation?")


async def test_answer_stays_short_even_for_huge_passages() -> None:
    sentence = "Throughput " + "units " * 100 + "matter."
    passages = [
        CorpusPassage("big.md", "Throughput " + "x" * 300, " ".join([sentence] * 3)),
        CorpusPassage("other.md", "Units " + "y" * 300, "Throughput units."),
        CorpusPassage("third.md", "More " + "z" * 300, "Throughput."),
    ]

    answer = await engine_of_passages(passages).answer("throughput units", [])

    assert answer.text.startswith("**Throughput " + "x" * 300 + "** (`big.md`)")
    assert len(answer.text) <= MAX_ANSWER_CHARS
    # Whole sentences only: what is quoted of the passage too long for the room is its sentences.
    quoted = answer.text.split("\n\n")[1]
    pieces = [piece for piece in re.split(r"(?<=matter\.)\s+", quoted) if piece not in ("", "[…]")]
    assert pieces and all(piece == sentence for piece in pieces)


async def test_no_match_says_so_without_sources(engine: RetrievalEngine) -> None:
    answer = await engine.answer("What about kubernetes helm charts?", [])

    assert answer.text == NO_MATCH_ANSWER
    assert "rephras" in answer.text
    assert answer.sources == ()


async def test_instructions_do_not_change_the_quote_and_the_note_says_so(engine: RetrievalEngine) -> None:
    plain = await engine.answer("JSON logs", [])
    instructed = await engine.answer("JSON logs", [], instructions="Answer in one sentence.")

    assert (instructed.text, instructed.sources) == (plain.text, plain.sources)
    assert plain.note is None
    assert instructed.note is not None and "follows none of the instructions" in instructed.note
    refused = await engine.answer("What about kubernetes helm charts?", [], instructions="Be brief.")
    assert refused.text == NO_MATCH_ANSWER and refused.note == instructed.note


async def test_an_empty_corpus_answers_nothing(tmp_path: Path) -> None:
    engine = engine_of(tmp_path)

    assert await engine.search("anything", 5) == []
    assert (await engine.answer("anything", [])).text == NO_MATCH_ANSWER


async def test_finds_a_planted_passage_among_two_thousand() -> None:
    topics = ["storage", "tokens", "logging", "deployment", "network", "billing", "quota", "retries"]
    passages = [
        CorpusPassage(
            f"generated/{n // 20:03d}.md",
            f"Section {n} > {topics[n % len(topics)].title()}",
            f"Passage {n} explains {topics[n % len(topics)]} and {topics[(n * 3) % len(topics)]} "
            "for the service, with the usual settings and defaults.",
        )
        for n in range(2000)
    ]
    planted = CorpusPassage("generated/planted.md", "Heliotrope", "The heliotrope switch rotates keys.")
    passages.insert(1234, planted)
    engine = engine_of_passages(passages)

    results = await engine.search("which switch rotates the heliotrope keys?", 3)

    assert engine.passage_count == 2001
    assert (results[0].source, results[0].heading) == ("generated/planted.md", "Heliotrope")
