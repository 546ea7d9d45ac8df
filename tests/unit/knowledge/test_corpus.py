"""Splitting a Markdown corpus into cited passages."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engines.retrieval.excerpts import blocks_of
from app.knowledge.chunks import MAX_PASSAGE_CHARS, chunk_text, split_blocks
from app.knowledge.corpus import (
    CorpusPassage,
    clean_markup,
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

    # Three blocks to CommonMark (a level-5 heading interrupts the paragraph), so three paragraphs.
    assert passages == [CorpusPassage("a.md", "A > Deep", "text\n\n##### Deeper\n\n#hashtag")]


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


def test_no_chunk_ends_on_a_heading_written_as_text_or_an_introduction() -> None:
    # As npm's docs write their selectors: level-5 headings inside a long section, and a
    # sentence introducing its list.
    text = "\n\n".join(
        ["A" * 500 + ".", "B" * 500 + ".", "##### `:vuln`", "C" * 500 + ".", "One of these:", "- x\n- y"]
    )

    chunks = chunk_text(text, max_chars=1200)

    assert chunks == [
        "A" * 500 + ".\n\n" + "B" * 500 + ".",
        "##### `:vuln`\n\n" + "C" * 500 + ".\n\nOne of these:\n\n- x\n- y",
    ]
    # What fits nowhere with what it leads into stays where it was.
    assert chunk_text("##### Head\n\n" + "D" * 1200, max_chars=1200) == ["##### Head", "D" * 1200]


def test_a_list_item_too_long_is_cut_between_the_items_of_its_own_list() -> None:
    # As the handbook's transit page writes its steps: one step holds a long list of its own.
    sub = [f"  - Field {n}: " + "word " * 30 for n in range(8)]
    text = "\n".join(["- Go to the site", "- Fill out the form:", *sub, "- Submit it"])

    chunks = chunk_text(text, max_chars=600)

    assert len(chunks) > 1 and all(len(c) <= 600 for c in chunks)
    # No line is joined to another or cut: every line is where it was, in order.
    assert [line.strip() for c in chunks for line in c.split("\n")] == [
        line.strip() for line in text.split("\n")
    ]
    # A chunk that starts inside the step's own list starts at the left, so it reads as a list.
    assert all(c.startswith("- ") for c in chunks)


def test_a_paragraph_longer_than_the_limit_is_cut_at_sentences() -> None:
    paragraph = " ".join(f"Sentence number {n} is here." for n in range(100))

    chunks = chunk_text(paragraph, max_chars=200)

    assert len(chunks) > 1
    assert all(len(c) <= 200 for c in chunks)
    assert all(c.endswith(".") for c in chunks)
    assert " ".join(chunks) == paragraph


def test_a_long_paragraph_wrapped_at_lines_is_cut_at_sentences_not_at_lines() -> None:
    # Sentences of different lengths, each wrapped over two lines.
    sentences = [
        f"Sentence {n} runs on{' and on' * (n % 4)}\nto its end on the next line." for n in range(20)
    ]
    wrapped = "\n".join(sentences)

    chunks = chunk_text(wrapped, max_chars=150)

    assert len(chunks) > 1 and all(len(c) <= 150 for c in chunks)
    assert all(c.startswith("Sentence") and c.endswith("the next line.") for c in chunks)


def test_a_long_list_is_cut_between_its_items_each_kept_as_written() -> None:
    items = [
        f"- `option{n}` {{number}} What it limits, for every\n  request it sends. **Default:** `{n}`."
        for n in range(12)
    ]
    block = "\n".join(items)

    chunks = chunk_text(block, max_chars=300)

    assert len(chunks) > 1 and all(len(c) <= 300 for c in chunks)
    assert "\n".join(chunks) == block  # lines and markers as written, no item cut


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
    (tmp_path / "notes.json").write_text('{"not": "markdown"}\n', encoding="utf-8")

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
    assert "Tokens expire after one hour." in text
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
    assert "**Large bodies**\n\nBodies are buffered.\n\n```python\napp = App()\n```" in text
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
    (tmp_path / "notes.json").write_text("{}\n", encoding="utf-8")

    files = read_corpus(tmp_path)

    assert [(f.source, f.title) for f in files] == [("guide.mdx", "Guide"), ("plain.md", "Plain")]
    assert files[0].text == "<Note>Read me.</Note>\n"
    assert load_corpus(tmp_path)[0] == CorpusPassage("guide.mdx", "Guide", "Read me.")


def texts(markdown: str, source: str = "a.md") -> dict[str, str]:
    """Each heading chain of a document and its passages' text, joined."""
    found: dict[str, str] = {}
    for passage in split_markdown(markdown, source):
        found[passage.heading] = "\n\n".join(filter(None, [found.get(passage.heading), passage.text]))
    return found


def test_setext_headings_start_passages_like_atx_ones() -> None:
    markdown = "Guide\n=====\n\nIntro.\n\nInstall\n-------\n\nRun it.\n\nA line\nthen text.\n"

    assert texts(markdown, "guide.md") == {
        "Guide": "Intro.",
        "Guide > Install": "Run it.\n\nA line\nthen text.",
    }
    assert parse_file(markdown, "guide.md").title == "Guide"


def test_hashes_in_code_of_every_kind_are_not_headings_and_the_code_stays_whole() -> None:
    markdown = (
        "# Deploy\n\n"
        "````md\n```bash\n# not a heading\n```\n````\n\n"
        "~~~\n## nor this\n~~~\n\n"
        "    # indented code\n    make\n\n"
        "Done.\n"
    )

    (passage,) = split_markdown(markdown, "deploy.md")

    assert passage.heading == "Deploy"
    assert passage.text == (
        "````md\n```bash\n# not a heading\n```\n````\n\n~~~\n## nor this\n~~~\n\n"
        "```\n# indented code\nmake\n```\n\nDone."
    )
    assert [is_code for _, is_code in split_blocks(passage.text)] == [True, True, True, False]


def test_a_fence_is_long_enough_that_no_line_of_its_code_closes_it() -> None:
    text = clean_markup("    ```\n    inside\n    ```\n")

    assert text == "````\n```\ninside\n```\n````"
    assert split_blocks(text) == [(text, True)]


def test_a_heading_inside_a_list_item_is_text_of_the_item() -> None:
    assert texts("# A\n\n- ## Not a section\n- item\n") == {"A": "- Not a section\n- item"}


def test_nested_lists_keep_their_markers_and_indentation() -> None:
    markdown = (
        "# Lists\n\n"
        "* one\n* two\n  + two a\n    3) deep\n    4) deeper\n* three\n\n"
        "1. first\n\n   More on [first](x).\n\n   ```sh\n   run\n   ```\n\n2. second\n"
    )

    text = texts(markdown)["Lists"]

    assert text == (
        "- one\n- two\n  - two a\n    3) deep\n    4) deeper\n- three\n\n"
        "1. first\n\n   More on first.\n\n   ```sh\n   run\n   ```\n\n2. second"
    )
    assert ("   ```sh\n   run\n   ```", True) in split_blocks(text)


def test_a_code_block_opening_a_list_item_is_still_a_code_block() -> None:
    text = clean_markup("- ```js\n  code()\n  ```\n- two\n")

    assert ("  ```js\n  code()\n  ```", True) in split_blocks(text)
    assert ("- two", False) in split_blocks(text)


def test_tables_become_pipe_tables_of_plain_cells() -> None:
    markdown = (
        "# T\n\nName | Notes\n:-- | --:\n[link](https://x.example) | a \\| b<br>c\n`x\\|y` | **bold**\n"
    )

    assert texts(markdown)["T"] == "| Name | Notes |\n| --- | --- |\n| link | a \\| b c |\n| `x\\|y` | bold |"


def test_a_table_is_one_block_an_answer_quotes_whole() -> None:
    text = clean_markup(
        "Setting | Default | Notes\n--|--|--\n`TIMEOUT` | 30 | [Seconds](x) before **giving up**\n"
    )

    assert [(block.kind, block.text) for block in blocks_of(text)] == [
        (
            "table",
            "| Setting | Default | Notes |\n| --- | --- | --- |\n"
            "| `TIMEOUT` | 30 | Seconds before giving up |",
        )
    ]


def test_a_prose_line_that_would_open_a_fence_is_escaped_and_stays_prose() -> None:
    text = clean_markup("```a` is not a fence: its info has a backtick\n\nNext.\n")

    assert split_blocks(text) == [
        ("\\```a` is not a fence: its info has a backtick", False),
        ("Next.", False),
    ]


def test_inline_markup_is_reduced_to_its_text_and_code_spans_keep_their_content() -> None:
    markdown = (
        "See [the docs](https://x.example/d) and ![a diagram](d.png), `a  b` and ``a ` tick``, *em* "
        "_em_ **strong** ~~old~~ &amp; \\*star\\* <https://auto.example>.\n\n[ref]: https://ref.example\n"
    )

    assert clean_markup(markdown) == (
        "See the docs and a diagram, `a  b` and ``a ` tick``, em em strong old & *star* https://auto.example."
    )


def test_headings_lose_emphasis_images_and_tags_but_keep_code() -> None:
    markdown = "# The *big* `Store` ![logo](l.png) <small>v2</small>\n\nText.\n"

    assert list(texts(markdown)) == ["The big `Store` logo v2"]


def test_a_heading_with_no_text_is_no_heading() -> None:
    markdown = "# <img src=logo.png>\n\nIntro.\n\n# Guide\n\nText.\n## \nMore.\n"

    assert parse_file(markdown, "a.md").title == "Guide"
    assert [(p.heading, p.text) for p in split_markdown(markdown, "a.md")] == [
        ("Guide", "Intro."),
        ("Guide", "Text.\n\nMore."),
    ]


def test_html_blocks_lose_tags_scripts_and_styles_and_their_text_is_read_as_markdown() -> None:
    markdown = (
        "# H\n\n"
        '<div class="note">\n**Bold** text and [a link](x).\n</div>\n\n'
        "<script>\nalert(1)\n</script>\n\n<style>\np { color: red }\n</style>\n\n"
        "Press <kbd>Ctrl</kbd>+<kbd>C</kbd>. Write &lt;b&gt; or \\<i> for markup.\n\n"
        "<table><tr><td>One</td><td>Two</td></tr></table>\n"
    )

    assert texts(markdown)["H"] == (
        "Bold text and a link.\n\nPress Ctrl+C. Write <b> or <i> for markup.\n\nOne\n\nTwo"
    )


def test_the_indented_text_of_an_html_element_after_a_blank_line_is_prose_not_code() -> None:
    markdown = '# H\n\n<div\n  class="box">\n  <p>\n    First part.\n\n    Second part.\n  </p>\n</div>\n'

    assert texts(markdown)["H"] == "First part.\n\nSecond part."


def test_mdx_statements_components_and_expressions_go_and_their_prose_stays() -> None:
    markdown = (
        "import {\n  A,\n  B,\n} from './x'\nexport const data = [\n  1,\n  2,\n]\n\n"
        "# MDX\n\n"
        '<Tabs.Item value="a" label={`Label "${x}"`}>\n  Inside the tab.\n</Tabs.Item>\n\n'
        "<>\nIn a fragment.\n</>\n\n"
        '<Note\n  title="spread over lines"\n>\nNoted.\n</Note>\n\n'
        "Literal \\{brace\\}, an unclosed { and `{code}`.\n\n"
        "```js\nexport default {a: 1}\n```\n"
    )

    assert texts(markdown, "a.mdx") == {
        "MDX": "Inside the tab.\n\nIn a fragment.\n\nNoted.\n\n"
        "Literal {brace}, an unclosed { and `{code}`.\n\n```js\nexport default {a: 1}\n```"
    }


def test_braces_and_export_lines_are_mdx_syntax_only_in_an_mdx_file() -> None:
    markdown = "# Notes\n\nexport the data with {format}.\n"

    assert texts(markdown, "a.md") == {"Notes": "export the data with {format}."}
    assert texts(markdown, "a.mdx") == {}


def test_mkdocs_admonitions_keep_quoted_titles_and_their_nested_content() -> None:
    markdown = (
        "# A\n\n"
        "!!! note\n    Untitled body.\n\n"
        '???+ tip "Open tip"\n    Tip body.\n\n    !!! warning "Nested"\n        Nested body.\n\n'
        "Outside.\n"
    )

    assert (
        texts(markdown)["A"]
        == "Untitled body.\n\n**Open tip**\n\nTip body.\n\n**Nested**\n\nNested body.\n\nOutside."
    )


def test_an_admonition_with_nothing_left_under_it_leaves_no_title() -> None:
    # mkdocstrings' `:::` directive goes, so the "API Reference" it was titled by goes with it.
    markdown = '# A\n\n??? abstract "API Reference"\n    ::: pkg.App\n        options:\n            x: 1\n\n'
    markdown += "Text.\n"

    assert texts(markdown)["A"] == "Text."


def test_docusaurus_admonitions_lose_their_markers_and_title() -> None:
    markdown = "# A\n\n:::tip What you will learn\n\n- Things\n\n:::\n\nAfter.\n"

    assert texts(markdown)["A"] == "- Things\n\nAfter."


def test_pymdownx_tabs_keep_their_title_and_their_code_stays_code() -> None:
    markdown = (
        '# A\n\n=== "Python"\n\n    ```python\n    print(1)\n    ```\n\n=== "Shell"\n\n    Run `make`.\n'
    )

    text = texts(markdown)["A"]

    assert text == "**Python**\n\n```python\nprint(1)\n```\n\n**Shell**\n\nRun `make`."
    assert ("```python\nprint(1)\n```", True) in split_blocks(text)


def test_a_mkdocstrings_directive_and_its_options_go_and_the_text_after_stays() -> None:
    markdown = "# API\n\n::: package.module.Class\n    options:\n      show_source: false\n\nThe class.\n"

    assert texts(markdown) == {"API": "The class."}


def test_front_matter_closed_by_dots_or_after_a_bom_or_with_crlf_is_stripped() -> None:
    for markdown in ("---\ntitle: T\n...\nBody.\n", "\ufeff---\ntitle: T\n---\nBody.\n"):
        assert split_front_matter(markdown) == ({"title": "T"}, "Body.\n")
    assert split_front_matter("---\r\ntitle: T\r\n---\r\nBody.\r\n") == ({"title": "T"}, "Body.\r\n")


@pytest.mark.parametrize(
    "markdown",
    [
        "---\ntitle: T\nBody without a closing rule.\n",
        "--- title: T\n---\nBody.\n",
        "---\ntitle: [unclosed\n---\nBody.\n",
        "---\n---\nBody.\n",
        "---\n- a list\n- is not a mapping\n---\nBody.\n",
        "Text first.\n\n---\ntitle: T\n---\n",
    ],
)
def test_what_is_not_a_closed_top_yaml_mapping_is_not_front_matter(markdown: str) -> None:
    assert split_front_matter(markdown) == ({}, markdown)


def test_a_top_block_that_is_not_front_matter_is_read_as_markdown() -> None:
    passages = split_markdown("---\n# Real title\n\nJust words.\n---\nMore.\n", "a.md")

    assert [(p.heading, p.text) for p in passages] == [("Real title", "Just words.\n\nMore.")]


def test_a_front_matter_title_that_is_not_text_falls_back_to_the_first_heading() -> None:
    assert parse_file("---\ntitle: 42\n---\n# Guide\n", "a.md").title == "Guide"
    assert parse_file("---\ntitle: '  '\n---\nNo heading.\n", "docs/a.md").title == "a.md"


def test_clean_markup_writes_every_heading_as_an_atx_heading() -> None:
    assert clean_markup("Title\n===\n\nSub\n---\n\n###### Six ######\n") == "# Title\n\n## Sub\n\n###### Six"


def test_footnotes_keep_their_text_and_lose_their_markers() -> None:
    markdown = "# F\n\nA claim.[^1]\n\n[^1]: The source of it.\n"

    assert texts(markdown) == {"F": "A claim.\n\nThe source of it."}
