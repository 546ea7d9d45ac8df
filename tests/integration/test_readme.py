"""The README's commands, run as written against a live server on embedded defaults."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from support.anvil_server import anvil_command, run_anvil

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def code_blocks(markdown: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", markdown, flags=re.S)


def test_quick_start_is_two_commands_first() -> None:
    first = code_blocks(README)[0].strip().splitlines()
    assert first == ["./dev.sh serve", "./dev.sh test"]
    assert "./dev.sh test" in (ROOT / ".ci" / "run").read_text()


def test_try_it_examples_run_against_a_live_server(tmp_path: Path) -> None:
    examples = code_blocks(README.split("## Try it", 1)[1].split("\n## ", 1)[0])
    assert len(examples) == 4
    script = "\n".join(examples)
    assert "URL=http://127.0.0.1:8000" in script and ".venv/bin/anvil" in script
    with run_anvil(tmp_path / "data") as server:
        script = script.replace("URL=http://127.0.0.1:8000", f"URL={server.url}")
        script = script.replace(".venv/bin/anvil", " ".join(anvil_command()))
        env = {**os.environ, "ANVIL_DATA_DIR": str(server.data_dir)}
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True, timeout=60
        )
    assert ran.returncode == 0, ran.stderr
    replies = [json.loads(line) for line in ran.stdout.replace("}{", "}\n{").splitlines() if line.strip()]
    assert len(replies) == 4
    modern, initialize, legacy, rest = replies
    assert modern["result"]["structuredContent"]["turn"] == 1
    assert modern["result"]["structuredContent"]["sources"], "retrieval over docs/ should cite something"
    assert initialize["result"]["protocolVersion"] == "2025-06-18"
    assert legacy["result"]["structuredContent"]["turn"] == 2
    assert rest["turn"] == 3 and rest["conversationId"] == "readme-demo"
    # "Each answer carries `structuredContent` (REST: the body) with `answer`, ...": every key.
    named = re.findall(r"`(\w+)`", README.split("Each answer carries", 1)[1].split(";", 1)[0])
    assert set(named) - {"structuredContent"} == set(rest) == set(modern["result"]["structuredContent"])


@pytest.mark.parametrize("block", code_blocks(README))
def test_readme_commands_are_plain_bash(block: str) -> None:
    ran = subprocess.run(["bash", "-n", "-c", block], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
