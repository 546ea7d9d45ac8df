"""Splitting a Markdown corpus into cited passages."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.knowledge.corpus import (
    MAX_PASSAGE_CHARS,
    CorpusPassage,
    chunk_text,
    file_passages,
    parse_file,
    split_front_matter,
)
from app.knowledge.corpus_files import read_corpus

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


def test_code_fences_are_kept_whole_and_their_comments_are_not_headings() -> None:
    markdown = "# Deploy\n\nRun this:\n\n```bash\n# build first\nmake image\n```\n\nDone.\n"

    passages = split_markdown(markdown, "deploy.md")

    assert len(passages) == 1
    assert passages[0].heading == "Deploy"
    assert "```bash\n# build first\nmake image\n```" in passages[0].text
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


def split_markdown(markdown: str, source: str, max_chars: int = MAX_PASSAGE_CHARS) -> list[CorpusPassage]:
    """One Markdown document (front matter and all) cut into passages, as the engine cuts a file."""
    return file_passages(parse_file(markdown, source), max_chars)


def load_corpus(root: Path) -> list[CorpusPassage]:
    """Every passage of every corpus file under `root`, files in order, as the engine reads them."""
    return [passage for file in read_corpus(root) for passage in file_passages(file)]


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


def test_front_matter_is_stripped_and_its_title_names_the_document() -> None:
    markdown = "---\ntitle: Storage guide\nsidebar: 3\n---\n\nIntro text.\n\n## Backups\n\nNightly.\n"

    file = parse_file(markdown, "guide/storage.md")
    passages = file_passages(file)

    assert file.title == "Storage guide"
    assert file.text == "\nIntro text.\n\n## Backups\n\nNightly.\n"
    assert [(p.heading, p.text) for p in passages] == [
        ("Storage guide", "Intro text."),
        ("Storage guide > Backups", "Nightly."),
    ]
    assert all("sidebar" not in p.text for p in passages)


def test_a_top_rule_that_is_not_yaml_front_matter_is_left_alone() -> None:
    markdown = "---\nJust some words between two rules.\n---\n# Title\n"

    front, body = split_front_matter(markdown)

    assert front == {}
    assert body == markdown


def test_the_title_falls_back_to_the_first_heading_then_the_file_name() -> None:
    assert parse_file("Intro.\n\n# Guide\n", "docs/guide.md").title == "Guide"
    assert parse_file("No heading at all.\n", "docs/notes.md").title == "notes.md"
    assert parse_file("---\ntitle: From front matter\n---\n# Heading\n", "a.md").title == "From front matter"


def test_mdx_markup_is_skipped_and_the_prose_inside_components_kept() -> None:
    markdown = (
        "---\ntitle: Tokens\n---\n"
        "import Tabs from '@site/src/Tabs';\n"
        "export const meta = {\n  draft: true,\n};\n\n"
        "# Tokens\n\n"
        '<Callout type="warning" icon={<Icon />}>\n'
        "Tokens expire after **one hour**. {/* reviewed */}\n"
        "</Callout>\n\n"
        'The current user is {props.user}; refresh with `{"grant": 1}`.\n\n'
        "```jsx\n<Tabs items={[1, 2]} />\n```\n"
    )

    passages = file_passages(parse_file(markdown, "tokens.mdx"))
    text = "\n".join(p.text for p in passages)

    assert [p.heading for p in passages] == ["Tokens"]
    assert "Tokens expire after **one hour**." in text
    assert 'The current user is ; refresh with `{"grant": 1}`.' in text
    assert "```jsx\n<Tabs items={[1, 2]} />\n```" in text
    for markup in ("import", "export", "draft", "<Callout", "</Callout>", "reviewed", "props.user", "Icon"):
        assert markup not in text.replace("```jsx\n<Tabs items={[1, 2]} />\n```", "")


def test_braces_in_plain_markdown_are_prose() -> None:
    passages = split_markdown("# Routes\n\nUse `/users/{id}` or /items/{name} as paths.\n", "routes.md")

    assert passages[0].text == "Use `/users/{id}` or /items/{name} as paths."


def test_html_tags_and_comments_go_but_their_text_stays() -> None:
    markdown = (
        '# Links\n\n<!-- hidden\nnote -->\n<a href="https://example.com" target="_blank">Example site</a>\n'
    )

    passages = split_markdown(markdown, "links.md")

    assert passages == [CorpusPassage("links.md", "Links", "Example site")]


def test_admonitions_keep_their_content_and_directives_go() -> None:
    markdown = (
        "# Buffering\n\n"
        '??? abstract "API Reference"\n'
        "    ::: package.module.Class\n        options:\n            x: false\n\n"
        '!!! note "Large bodies"\n    Bodies are buffered.\n\n    ```python\n    app = App()\n    ```\n\n'
        "After the note.\n"
    )

    text = split_markdown(markdown, "buffering.md")[0].text

    assert ":::" not in text and "options" not in text and "!!!" not in text and "???" not in text
    assert "Large bodies\n\nBodies are buffered.\n\n```python\napp = App()\n```" in text
    assert text.endswith("After the note.")


def test_headings_lose_anchor_ids_and_link_syntax() -> None:
    markdown = "## Setup {#setup}\nText.\n## [EventSource](https://example.com/sse)\nMore.\n"

    assert [p.heading for p in split_markdown(markdown, "a.md")] == ["Setup", "EventSource"]


def test_a_code_block_is_never_cut_even_when_longer_than_a_chunk() -> None:
    code = "```python\n" + "\n\n".join(f"line_{n} = {n}" for n in range(60)) + "\n```"
    markdown = f"# Code\n\nIntro paragraph.\n\n{code}\n\nAfter the code.\n"

    passages = split_markdown(markdown, "code.md", max_chars=200)

    holding = [p for p in passages if "line_0 = 0" in p.text]
    assert len(holding) == 1
    assert code in holding[0].text
    assert all(p.text.count("```") % 2 == 0 for p in passages)


def test_a_long_table_is_cut_between_rows_and_each_piece_keeps_the_header() -> None:
    rows = "\n".join(f"| `SETTING_{n}` | value {n} |" for n in range(30))
    markdown = f"# Settings\n\n| Name | Default |\n| --- | --- |\n{rows}\n"

    passages = split_markdown(markdown, "settings.md", max_chars=300)

    assert len(passages) > 1
    assert all(p.text.startswith("| Name | Default |\n| --- | --- |\n| `SETTING_") for p in passages)
    assert sum(p.text.count("`SETTING_") for p in passages) == 30


def test_read_corpus_reads_md_and_mdx_and_keeps_the_whole_text(tmp_path: Path) -> None:
    (tmp_path / "guide.mdx").write_text("---\ntitle: Guide\n---\n<Note>Read me.</Note>\n", encoding="utf-8")
    (tmp_path / "plain.md").write_text("# Plain\nText.\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("Ignored.\n", encoding="utf-8")

    files = read_corpus(tmp_path)

    assert [(f.source, f.title) for f in files] == [("guide.mdx", "Guide"), ("plain.md", "Plain")]
    assert files[0].text == "<Note>Read me.</Note>\n"
    assert load_corpus(tmp_path)[0] == CorpusPassage("guide.mdx", "Guide", "Read me.")
