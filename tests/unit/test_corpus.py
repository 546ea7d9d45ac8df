"""Splitting a Markdown corpus into cited passages."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.adapters.engines.corpus import (
    MAX_PASSAGE_CHARS,
    CorpusPassage,
    chunk_text,
    load_corpus,
    split_markdown,
)

STORAGE = """# Storage

Anvil keeps conversations in a store.

## Cosmos DB

Cosmos DB keeps each conversation for its time to live.

### Partitioning

Each user gets a partition.

## SQLite

SQLite keeps conversations on local disk.
"""


def test_splits_at_headings_with_the_heading_chain() -> None:
    passages = split_markdown(STORAGE, "storage.md")

    assert [(p.heading, p.text) for p in passages] == [
        ("Storage", "Anvil keeps conversations in a store."),
        ("Storage > Cosmos DB", "Cosmos DB keeps each conversation for its time to live."),
        ("Storage > Cosmos DB > Partitioning", "Each user gets a partition."),
        ("Storage > SQLite", "SQLite keeps conversations on local disk."),
    ]
    assert {p.source for p in passages} == {"storage.md"}


def test_headings_without_text_give_no_passage() -> None:
    passages = split_markdown("# Title\n\n## Empty\n\n\n## Full\nSome text.\n", "a.md")

    assert passages == [CorpusPassage("a.md", "Title > Full", "Some text.")]


def test_text_before_any_heading_is_filed_under_the_title_or_the_file_name() -> None:
    titled = split_markdown("Intro line.\n\n# Guide\n\nBody.\n", "docs/guide.md")
    untitled = split_markdown("Just text, no headings.\n", "docs/notes.md")

    assert titled[0] == CorpusPassage("docs/guide.md", "Guide", "Intro line.")
    assert untitled == [CorpusPassage("docs/notes.md", "notes.md", "Just text, no headings.")]


def test_only_four_heading_levels_split_and_a_hash_needs_a_space() -> None:
    markdown = "# A\n#### Deep\ntext\n##### Deeper\n#hashtag\n"

    passages = split_markdown(markdown, "a.md")

    assert passages == [CorpusPassage("a.md", "A > Deep", "text\n##### Deeper\n#hashtag")]


def test_closing_hashes_are_not_part_of_the_heading() -> None:
    passages = split_markdown("## Settings ##\nBody.\n## Use C#\nMore.\n", "a.md")

    assert [p.heading for p in passages] == ["Settings", "Use C#"]


def test_code_fences_lose_their_backticks_but_keep_code_and_hide_comments_from_headings() -> None:
    markdown = "# Deploy\n\nRun this:\n\n```bash\n# build first\nmake image\n```\n\nDone.\n"

    passages = split_markdown(markdown, "deploy.md")

    assert len(passages) == 1
    assert passages[0].heading == "Deploy"
    assert "```" not in passages[0].text
    assert "# build first\nmake image" in passages[0].text
    assert passages[0].text.endswith("Done.")


def test_long_sections_are_chunked_at_paragraph_boundaries() -> None:
    paragraphs = [f"Paragraph {n}: " + "word " * 60 for n in range(20)]
    markdown = "# Long\n\n" + "\n\n".join(p.strip() for p in paragraphs) + "\n"

    passages = split_markdown(markdown, "long.md")

    assert len(passages) > 1
    assert all(len(p.text) <= MAX_PASSAGE_CHARS for p in passages)
    assert all(p.heading == "Long" for p in passages)
    # No paragraph is cut in two, and together the chunks keep them all, in order.
    rejoined = [para for p in passages for para in p.text.split("\n\n")]
    assert rejoined == [p.strip() for p in paragraphs]


def test_a_paragraph_longer_than_the_limit_is_cut_at_sentences() -> None:
    paragraph = " ".join(f"Sentence number {n} is here." for n in range(100))

    chunks = chunk_text(paragraph, max_chars=200)

    assert len(chunks) > 1
    assert all(len(c) <= 200 for c in chunks)
    assert all(c.endswith(".") for c in chunks)
    assert " ".join(chunks) == paragraph


def test_a_word_longer_than_the_limit_is_cut_hard() -> None:
    chunks = chunk_text("x" * 250, max_chars=100)

    assert [len(c) for c in chunks] == [100, 100, 50]


def test_chunk_text_of_blank_text_is_empty() -> None:
    assert chunk_text("  \n\n \n") == []


def test_load_corpus_walks_the_directory_with_relative_sorted_sources(tmp_path: Path) -> None:
    (tmp_path / "ops").mkdir()
    (tmp_path / "storage.md").write_text("# Storage\nKeeps data.\n", encoding="utf-8")
    (tmp_path / "auth.md").write_text("# Auth\nChecks tokens.\n", encoding="utf-8")
    (tmp_path / "ops" / "runbook.md").write_text("# Runbook\nRestart it.\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("# Not markdown\nIgnored.\n", encoding="utf-8")

    passages = load_corpus(tmp_path)

    assert [p.source for p in passages] == ["auth.md", "ops/runbook.md", "storage.md"]
    assert passages[1] == CorpusPassage("ops/runbook.md", "Runbook", "Restart it.")


def test_load_corpus_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError, match="corpus directory"):
        load_corpus(tmp_path / "missing")
