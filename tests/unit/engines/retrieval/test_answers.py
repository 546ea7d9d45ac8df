"""What the retrieval engine answers: the passages that answer, quoted whole (code, lists and
tables with what introduces them), labelled and linked; and `fetch`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.retrieval import engine_of, engine_of_passages

from app.domain.ports import AnswerEngine, Document
from app.engines.retrieval.engine import MAX_ANSWER_CHARS, RetrievalEngine
from app.engines.retrieval.excerpts import quote
from app.knowledge.corpus import CorpusPassage
from app.knowledge.corpus_cache import index_folder

pytestmark = pytest.mark.anyio

SETTINGS = """---
title: Configuration
---

# Configuration

Every setting is read from an environment variable.

## Reference

| Variable | Default | Description |
| --- | --- | --- |
| `APP_PORT` | `8000` | Port the server listens on. |
| `APP_HOST` | `127.0.0.1` | Address the server binds to. |
| `APP_LOG_LEVEL` | `info` | Level of the log lines. |
"""

DEPLOY = """# Deploy

## Build the image

Build the container image with one command:

```bash
docker build -t app .
```

The image holds everything the service needs.

## Generated manifest

The manifest below is generated; never edit the manifest by hand.

```yaml
{manifest}
```
"""

LONG = """# Throughput

{sentences}
"""


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    manifest = "\n".join(f"key_{n}: value number {n} of the generated manifest" for n in range(40))
    sentences = " ".join(
        f"Throughput sentence {n} explains how request units and partitions shape throughput limits."
        for n in range(40)
    )
    (tmp_path / "settings.md").write_text(SETTINGS, encoding="utf-8")
    (tmp_path / "deploy.md").write_text(DEPLOY.format(manifest=manifest), encoding="utf-8")
    (tmp_path / "long.md").write_text(LONG.format(sentences=sentences), encoding="utf-8")
    return tmp_path


@pytest.fixture
def engine(corpus: Path) -> RetrievalEngine:
    return engine_of(corpus)


@pytest.fixture
def corpus_text(corpus: Path) -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in corpus.glob("*.md"))


@pytest.fixture
def outside_files(corpus: Path) -> None:
    (corpus.parent / "secret.md").write_text("# Secret\n", encoding="utf-8")
    (corpus / "notes.json").write_text('{"not": "a document"}\n', encoding="utf-8")


def fenced_blocks(text: str) -> list[str]:
    return re.findall(r"```[^\n]*\n.*?\n```", text, flags=re.S)


async def test_a_table_is_quoted_whole_as_markdown_under_its_heading(engine: RetrievalEngine) -> None:
    answer = await engine.answer("Which port does the server listen on?", [])

    assert answer.text.startswith("**Configuration > Reference** (`settings.md`)\n\n")
    table = SETTINGS.split("## Reference\n\n", 1)[1].strip()
    assert table in answer.text


async def test_a_short_code_block_comes_with_the_sentence_that_introduces_it(engine: RetrievalEngine) -> None:
    answer = await engine.answer("How do I build the container image?", [])

    assert answer.text.startswith("**Deploy > Build the image** (`deploy.md`)\n\n")
    assert "Build the container image with one command:\n\n```bash\ndocker build -t app .\n```" in answer.text


async def test_a_long_code_block_that_does_not_fit_is_left_out_never_cut(corpus: Path) -> None:
    small = RetrievalEngine(index_folder(corpus), max_answer_chars=1000)
    answer = await small.answer("Can I edit the generated manifest by hand?", [])

    assert answer.sources[0].heading == "Deploy > Generated manifest"
    assert "never edit the manifest by hand" in answer.text
    assert "```" not in answer.text
    assert "key_0" not in answer.text
    assert len(answer.text) <= 1000


async def test_answers_never_cut_code_a_sentence_or_a_table(
    engine: RetrievalEngine, corpus_text: str
) -> None:
    questions = [
        "Which port does the server listen on?",
        "What is the default log level?",
        "How do I build the container image?",
        "What is in the generated manifest?",
        "How do partitions shape throughput limits?",
        "Which variable sets the host address?",
    ]
    for question in questions:
        text = (await engine.answer(question, [])).text
        assert text.count("```") % 2 == 0, question
        assert all(block in corpus_text for block in fenced_blocks(text)), question
        rows = [line for line in text.splitlines() if line.startswith("|")]
        assert all(row in corpus_text for row in rows), question
        assert not text.rstrip().endswith(":"), question
        assert len(text) <= MAX_ANSWER_CHARS, question


async def test_a_long_passage_is_quoted_in_whole_sentences(corpus: Path) -> None:
    small = RetrievalEngine(index_folder(corpus), max_answer_chars=700)
    answer = await small.answer("How do request units shape throughput limits?", [])

    quoted = answer.text.split("\n\n", 1)[1]
    assert len(answer.text) <= 700
    sentences = [s for s in re.split(r"(?<=limits\.)\s+", quoted) if s not in ("", "[…]")]
    assert sentences
    assert all(
        re.fullmatch(
            r"Throughput sentence \d+ explains how request units and partitions "
            r"shape throughput limits\.",
            s,
        )
        for s in sentences
    ), sentences


async def test_a_heading_only_match_quotes_the_sections_opening(engine: RetrievalEngine) -> None:
    answer = await engine.answer("configuration", [])

    assert answer.text.startswith(
        "**Configuration** (`settings.md`)\n\nEvery setting is read from an environment variable."
    )


async def test_answer_takes_a_progress_callback_and_ignores_it(engine: RetrievalEngine) -> None:
    calls: list[float] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        calls.append(done)

    as_port: AnswerEngine = engine
    plain = await as_port.answer("Which port does the server listen on?", [])
    told = await as_port.answer("Which port does the server listen on?", [], progress=progress)

    assert told == plain


async def test_fetch_returns_the_whole_file_without_front_matter(engine: RetrievalEngine) -> None:
    document = await engine.fetch("settings.md", 100_000)

    assert document == Document(
        source="settings.md",
        title="Configuration",
        text=SETTINGS.split("---\n", 2)[2],
        total_chars=len(SETTINGS.split("---\n", 2)[2]),
    )
    assert document is not None and not document.truncated


async def test_fetch_titles_fall_back_to_the_first_heading(engine: RetrievalEngine) -> None:
    document = await engine.fetch("deploy.md", 100_000)

    assert document is not None
    assert document.title == "Deploy"
    assert document.text.startswith("# Deploy\n\n## Build the image")


async def test_fetch_cuts_long_files_at_a_line_end(engine: RetrievalEngine) -> None:
    whole = await engine.fetch("deploy.md", 100_000)
    cut = await engine.fetch("deploy.md", 100)

    assert whole is not None and cut is not None
    assert cut.truncated
    assert cut.total_chars == len(whole.text)
    assert len(cut.text) <= 100
    assert whole.text.startswith(cut.text)
    assert whole.text[len(cut.text)] == "\n"


@pytest.mark.usefixtures("outside_files")
async def test_fetch_knows_only_the_files_it_loaded(engine: RetrievalEngine, corpus: Path) -> None:
    assert await engine.fetch("missing.md", 1000) is None
    assert await engine.fetch("../secret.md", 1000) is None
    assert await engine.fetch(str(corpus / "settings.md"), 1000) is None
    assert await engine.fetch("notes.json", 1000) is None


async def test_an_engine_built_from_passages_fetches_nothing() -> None:
    engine = engine_of_passages([CorpusPassage("a.md", "A", "Text.")])

    assert await engine.fetch("a.md", 1000) is None


async def test_other_pages_are_quoted_each_under_its_own_heading() -> None:
    engine = engine_of_passages(
        [
            CorpusPassage("tides.md", "Tides", "Tide tables list the high and low tide of every day."),
            CorpusPassage("tides.md", "Tides > Springs", "Spring tides are the highest of the month."),
            CorpusPassage("harbour.md", "Harbour", "The harbour office prints tide tables each month."),
            CorpusPassage("winds.md", "Winds", "Trade winds blow from the east."),
        ]
    )
    answer = await engine.answer("Where are the tide tables?", [])

    # The first passage is too short to answer alone: the section after it on its page follows.
    assert [p.source for p in answer.sources] == ["tides.md", "tides.md", "harbour.md"]
    assert answer.text == (
        "**Tides** (`tides.md`)\n\nTide tables list the high and low tide of every day.\n\n"
        "**Tides > Springs** (`tides.md`)\n\nSpring tides are the highest of the month.\n\n"
        "**Harbour** (`harbour.md`)\n\nThe harbour office prints tide tables each month."
    )


async def test_a_short_first_passage_is_joined_by_the_rest_of_its_section_under_one_heading() -> None:
    engine = engine_of_passages(
        [
            CorpusPassage("tides.md", "Tides", "Tide tables list every tide."),
            CorpusPassage("tides.md", "Tides", "They are printed on the first of the month."),
            CorpusPassage("winds.md", "Winds", "Trade winds blow from the east."),
        ]
    )
    answer = await engine.answer("Where are the tide tables?", [])

    assert answer.text == (
        "**Tides** (`tides.md`)\n\nTide tables list every tide.\n\n"
        "They are printed on the first of the month."
    )


async def test_a_first_passage_long_enough_to_answer_is_not_followed_by_the_next() -> None:
    opening = "Tide tables list the high and low tide of every day, " + "at every port, " * 12 + "too."
    engine = engine_of_passages(
        [
            CorpusPassage("tides.md", "Tides", opening),
            CorpusPassage("tides.md", "Tides > Springs", "Spring tides are the highest of the month."),
            CorpusPassage("tides.md", "Tides > Neaps", "Neap tides follow them."),
        ]
    )
    answer = await engine.answer("Where are the tide tables?", [])

    assert [p.heading for p in answer.sources] == ["Tides"]
    # A page's last passage, however short, has nothing after it to add.
    last = await engine.answer("When are neap tides?", [])
    assert [p.heading for p in last.sources] == ["Tides > Neaps"]


async def test_a_link_heads_each_quote_when_the_corpus_names_its_site(corpus: Path) -> None:
    engine = RetrievalEngine(index_folder(corpus, site="https://docs.example.com/app"))
    answer = await engine.answer("How do I build the container image?", [])

    assert answer.text.startswith(
        "**Deploy > Build the image** ([deploy.md](https://docs.example.com/app/deploy#build-the-image))"
    )


def test_a_passage_ending_on_an_introduction_is_quoted_without_it() -> None:
    weights = {"flag": 1.0}
    # What it introduces begins the next passage: the introduction alone would end on a colon.
    assert quote("The tool takes a few flags.\n\nThe following flags are supported:", weights, 1000) == (
        "The tool takes a few flags."
    )
    with_list = "The following flags are supported:\n\n- `--quiet`: say less."
    assert quote(with_list, weights, 1000) == with_list
    # Its image was left out: prose follows, nothing it introduces.
    imaged = "Each flag changes the log as you can see:\n\nThe flags are read at start."
    assert quote(imaged, weights, 1000) == "The flags are read at start."
