"""`bench/rerank_fit.py` on two small question sets the test writes: every set is held out once,
with how often its right page is among the candidates at all, and the weights fitted on all of
them are printed as `WEIGHTS` is written, one per feature."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from app.engines.retrieval.rerank import WEIGHTS

ROOT = Path(__file__).resolve().parents[2]

SETS = {
    "plants": {
        "cactus.md": "# Cactus care\n\nWater a cactus once the soil is dry, about every two weeks.\n",
        "fern.md": "# Fern care\n\nMist a fern every morning; ferns like humid air.\n",
        "orchid.md": "# Orchid care\n\nAn orchid flowers again after a cool night or two.\n",
    },
    "bikes": {
        "chain.md": "# Chains\n\nOil the chain after a wet ride and wipe off what is left.\n",
        "tyres.md": "# Tyres\n\nPump road tyres to the pressure printed on their side.\n",
        "brakes.md": "# Brakes\n\nReplace brake pads once their grooves are worn away.\n",
    },
}
QUESTIONS = {
    "plants": [
        ("How often does a cactus need watering?", "cactus.md"),
        ("How do I mist a fern?", "fern.md"),
        # Answered by a page the set does not hold: no order of the candidates finds it.
        ("How do I repot a bonsai?", "bonsai.md"),
    ],
    "bikes": [("When should I oil my chain?", "chain.md"), ("How hard do I pump my tyres?", "tyres.md")],
}


def test_the_fit_holds_out_each_set_and_prints_every_weight(tmp_path: Path) -> None:
    sets = tmp_path / "sets"
    for name, files in SETS.items():
        folder = sets / f"{name}-docs"
        folder.mkdir(parents=True)
        for file, text in files.items():
            (folder / file).write_text(text, encoding="utf-8")
        single = [{"q": q, "file": file} for q, file in QUESTIONS[name]]
        (sets / f"{name}-questions.json").write_text(json.dumps({"single": single}), encoding="utf-8")

    ran = subprocess.run(
        [sys.executable, "bench/rerank_fit.py", "--sets", str(sets), "--cache", str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert ran.returncode == 0, ran.stderr
    held = re.findall(r"^\| (\w+) \|" + r" (\d+) \|" * 6 + "$", ran.stdout, re.M)
    counts = {name: [int(n) for n in numbers] for name, *numbers in held}
    assert sorted(counts) == ["bikes", "plants"]
    # Each page is its own subject: the fused score alone finds every page the set holds.
    assert counts["bikes"][:3] == [2, 2, 2] and counts["bikes"][4] == 2
    assert counts["plants"][:3] == [3, 2, 2] and counts["plants"][4] == 2
    printed = re.findall(r'^    "(\w+)": (-?\d+\.\d+) / (\d+\.\d+),$', ran.stdout, re.M)
    assert [name for name, _, _ in printed] == list(WEIGHTS)


def test_fewer_than_two_sets_are_refused_with_what_to_add(tmp_path: Path) -> None:
    ran = subprocess.run(
        [sys.executable, "bench/rerank_fit.py", "--sets", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 2
    assert "holds fewer than two NAME-questions.json" in ran.stderr
