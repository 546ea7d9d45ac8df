"""`bench/eval.py`, as docs/evaluation.md shows it, on a corpus and questions the test writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

QUESTIONS = {
    "single": [
        {"q": "How do I water a cactus?", "file": "cactus.md"},
        {"q": "How often should a fern be misted?", "file": "fern.md"},
    ],
    "off_topic": ["Who won the football world cup in 1998?"],
    "follow_ups": [
        {"first": "How do I water a cactus?", "then": "And how much light does it need?", "file": "cactus.md"}
    ],
}


def test_the_evaluation_command_scores_a_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "plants"
    corpus.mkdir()
    (corpus / "cactus.md").write_text(
        "# Cactus care\n\n## Watering\n\nWater a cactus once the soil is dry, about every two weeks.\n\n"
        "## Light\n\nA cactus needs bright light: a south-facing window suits it.\n",
        encoding="utf-8",
    )
    (corpus / "fern.md").write_text(
        "# Fern care\n\n## Humidity\n\nMist a fern every morning; ferns like humid air.\n", encoding="utf-8"
    )
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    ran = subprocess.run(
        [sys.executable, "bench/eval.py", "--corpus", str(corpus), "--questions", str(questions), "--serve"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert "hit@1                      1.00 (2/2)" in lines
    assert "hit@3                      1.00 (2/2)" in lines
    assert "off-topic refused one-shot 1.00 (1/1)" in lines
    assert "off-topic refused in conv. 1.00 (1/1)" in lines
    assert "follow-ups right           1.00 (1/1)" in lines
    # What the answers quote: the expected page under its label, and nothing flagged.
    assert "expected page quoted       1.00 (2/2)" in lines
    assert "answers flagged            0" in lines
    assert "misses:" not in ran.stdout

    # In process, every ranking over the same index, as one table.
    ran = subprocess.run(
        [
            sys.executable,
            *("bench/eval.py", "--corpus", str(corpus), "--questions", str(questions)),
            "--cache",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    rows = [line for line in ran.stdout.splitlines() if line.startswith("| questions |")]
    assert [row.split(" | ")[1] for row in rows] == ["lexical", "vector", "rrf", "hybrid"]
    assert "| questions | hybrid | 1.00 | 1.00 | 1/1 | 1/1 | 1/1 | 1.00 | 0 |" in rows


def test_the_report_flags_a_colon_a_cut_sentence_and_markup_and_reads_the_labels() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("eval_report", ROOT / "bench" / "eval.py")
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    sys.modules["eval_report"] = report  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(report)
    finally:
        del sys.modules["eval_report"]
    answer = (
        "**Guide > Install** ([guide.md](https://x/guide#install))\n\nRun this:\n\n**API** (`api.md`)\n\nThe"
    )
    assert report.quoted_pages(answer) == ["guide.md", "api.md"]
    assert report.problems("Intro.\n\n```\ncode ends without a stop\n```\n\nDone.") == []
    assert report.problems("Run this:") == ["ends on a colon"]
    assert report.problems("It was cut in the") == ["a paragraph stops mid-sentence: ...'It was cut in the'"]
    assert report.problems(":orphan:\n\nText.") == ["markup: ':orphan:'"]
    # A reference link or definition the parser could not resolve is markup too.
    assert report.problems("A [`Dispatcher`][] agent.") == ["markup: '][]'"]
    assert report.problems("Done.\n\n[`Pool`]: Pool.md#class-pool") == ["markup: '[`Pool`]: P'"]
    # A caption over its block and a label are no cut sentences; a short line over prose is.
    assert report.problems("Example\n\n```js\nx()\n```\n\nParameters\n\n- `x`\n\nStability: 2 - Stable") == []
    assert report.problems("Fastify\n\nA web framework.") == ["a paragraph stops mid-sentence: ...'Fastify'"]
    # A sentence that ends inside typographic quotes ends there.
    assert report.problems("He said, \u201cIt is not work.\u201d\n\nShe answered, \u2018Fine.\u2019") == []
