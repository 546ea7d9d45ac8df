"""docs/auth.md's "try Entra mode locally" commands, run as written against a real server."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from support.anvil_server import free_port, run_anvil

ROOT = Path(__file__).resolve().parents[2]
SECTION = "### Try Entra mode locally with the tests' issuer"


def local_blocks() -> list[str]:
    text = (ROOT / "docs" / "auth.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, flags=re.S)


def exported(block: str) -> dict[str, str]:
    names: dict[str, str] = {}
    for line in block.splitlines():
        if line.startswith("export "):
            for item in shlex.split(line.removeprefix("export ")):
                name, _, value = item.partition("=")
                names[name] = value
    return names


def test_the_local_entra_walkthrough_works_as_written(tmp_path: Path) -> None:
    start_issuer, start_anvil, ask = local_blocks()
    assert ".venv/bin/anvil serve" in start_anvil
    port = free_port()
    command = start_issuer.strip().replace("--port 8400", f"--port {port}")
    command = command.replace(".venv/bin/python", shlex.quote(sys.executable))
    # `exec env` makes the issuer itself the child process, so terminating it stops the issuer.
    issuer = subprocess.Popen(["bash", "-c", f"exec env {command}"], cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert issuer.stdout is not None
        printed: dict[str, str] = {}
        while "TOKEN" not in printed:
            line = issuer.stdout.readline().decode()
            assert line, "the issuer exited before printing a token"
            name, _, value = line.strip().partition("=")
            printed[name] = value

        documented = exported(start_anvil)
        assert documented.pop("ANVIL_ENTRA_AUTHORITY") == "http://127.0.0.1:8400"
        assert printed.pop("ANVIL_ENTRA_AUTHORITY") == f"http://127.0.0.1:{port}"
        token = printed.pop("TOKEN")
        assert printed == documented

        env = {**documented, "ANVIL_ENTRA_AUTHORITY": f"http://127.0.0.1:{port}"}
        with run_anvil(tmp_path / "data", env) as server:
            script = ask.replace("http://127.0.0.1:8000", server.url)
            ran = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                env={**os.environ, "TOKEN": token},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        assert ran.returncode == 0, ran.stderr
        answer = json.loads(ran.stdout)
        assert (answer["conversationId"], answer["turn"]) == ("local-entra", 1)
    finally:
        issuer.terminate()
        issuer.wait(timeout=10)
    assert issuer.returncode == 0
