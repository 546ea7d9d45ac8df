"""requirements.lock: the image's dependencies, pinned with hashes, and enough to run Anvil.

The image installs the lock before it copies the code (see the Dockerfile). No image is built
here; instead the same lock and the same sources go into a fresh virtual environment the way the
Dockerfile installs them (wheels only, every hash required, no dependency resolution, then Anvil
built by the locked setuptools, which then goes), and `anvil serve` from it answers over REST with
the Cosmos DB store the image uses.

uv, which ./dev.sh installs beside the suite's Python, stands in for the image's pip here: it
honours the same options and checks the same hashes, and it shares its cache with the
development install, so the install takes seconds where pip took most of a minute. The
Dockerfile keeps pip, which its base image already has.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from support.anvil_server import free_port, stop, wait_until_ready
from support.cosmos import run_cosmos_server

from app import __version__
from app.auth.dev import DevIssuer

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
DOCKERFILE = ROOT / "Dockerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
#: The environment the lock is for: the image's (Linux, CPython 3.11).
TARGET = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "python_version": "3.11",
    "implementation_name": "cpython",
}
#: Not the lock's to install: pip comes with the image's virtual environment, setuptools only
#: builds Anvil and is then removed.
BOOTSTRAP = {"pip", "setuptools"}
INSTALL_TIMEOUT = 240


@dataclass(frozen=True)
class Pin:
    """One entry of the lock: `name==version` and the hashes of its files."""

    name: str
    version: str
    hashes: tuple[str, ...]


def lock_entries() -> list[str]:
    """The lock's requirement entries, continuation lines joined, comments dropped."""
    entries: list[str] = []
    pending = ""
    for raw in LOCK.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        entries.append(pending + line)
        pending = ""
    assert not pending, "requirements.lock ends inside a continued line"
    return entries


def pins() -> dict[str, Pin]:
    found: dict[str, Pin] = {}
    for entry in lock_entries():
        requirement_text, *options = (part.strip() for part in entry.split(" --"))
        requirement = Requirement(requirement_text)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==" and "*" not in specifier.version, entry
        hashes = tuple(option.removeprefix("hash=") for option in options if option.startswith("hash="))
        assert len(hashes) == len(options), f"only --hash options belong on a pin: {entry[:80]}"
        name = canonicalize_name(requirement.name)
        assert name not in found, f"{name} is pinned twice"
        found[name] = Pin(name, specifier.version, hashes)
    return found


def declared() -> list[Requirement]:
    """What pyproject.toml asks for at run time, and the build backend the image builds with."""
    requirements = [Requirement(text) for text in PYPROJECT["project"]["dependencies"]]
    requirements += [Requirement(text) for text in PYPROJECT["build-system"]["requires"]]
    return [r for r in requirements if r.marker is None or r.marker.evaluate(TARGET)]


# --- what the file says ----------------------------------------------------------------------------


def test_every_entry_is_pinned_with_hashes() -> None:
    locked = pins()
    assert len(locked) > 20
    for pin in locked.values():
        assert pin.hashes, f"{pin.name} has no --hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in pin.hashes), pin


def test_every_declared_dependency_is_locked_within_its_range() -> None:
    locked = pins()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} (pyproject.toml) is not in requirements.lock"
        version = locked[name].version
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name}=={version}, outside pyproject.toml's {requirement}: regenerate it"
        )


def test_the_lock_is_for_the_python_of_the_image_and_says_how_to_regenerate_it() -> None:
    header = LOCK.read_text(encoding="utf-8").split("\n\n", 1)[0]
    locked_for = re.search(r"autogenerated by pip-compile with Python (\d+\.\d+)", header)
    assert locked_for, "the lock's header names the Python it was made for"
    bases = re.findall(
        r"^FROM python:(\d+\.\d+)[.\w-]*@sha256:", DOCKERFILE.read_text(encoding="utf-8"), re.M
    )
    assert bases == [locked_for.group(1)], f"image Python {bases}, lock for {locked_for.group(1)}"
    command = re.search(r"^#[ \t]+(.*pip-compile --.*)$", header, re.M)
    assert command, "the header holds the command that regenerates the lock"
    for option in ("--generate-hashes", "--build-deps-for=wheel", "--output-file=requirements.lock"):
        assert option in command.group(1)
    assert command.group(1).endswith(" pyproject.toml")


# --- installed the way the image installs it -------------------------------------------------------


def build_stage_sources() -> list[str]:
    """What the Dockerfile's build stage copies from the build context, in order."""
    stage: str | None = None
    sources: list[str] = []
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0].upper() == "FROM":
            stage = words[-1] if len(words) >= 3 and words[-2].upper() == "AS" else None
        elif stage == "build" and words[0].upper() == "COPY" and not words[1].startswith("--from"):
            sources += words[1:-1]
    return sources


def uv() -> Path:
    """The uv of the suite's environment (./dev.sh installs it there)."""
    found = Path(sys.executable).with_name("uv")
    if not found.is_file():
        pytest.fail(f"uv is not installed at {found}: ./dev.sh test installs it")
    return found


def uv_pip(venv: Path, *args: str) -> None:
    """`uv pip ARGS` into `venv`, with uv's cache, outside the suite's own virtual environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("UV_NO_CACHE", "VIRTUAL_ENV", "PYTHONPATH")}
    ran = subprocess.run(
        [str(uv()), "pip", *args, "--python", str(venv / "bin" / "python")],
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, f"uv pip {' '.join(args)} failed:\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"


@dataclass(frozen=True)
class LockedInstall:
    """A virtual environment made from requirements.lock and Anvil's sources, as in the image."""

    venv: Path
    site_packages: Path


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> LockedInstall:
    root = tmp_path_factory.mktemp("locked")
    venv = root / "venv"
    # Without pip, which uv does not need (the image's venv has it; BOOTSTRAP leaves it uncounted).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # The Dockerfile's two steps: the lock (wheels only, hashes required), then Anvil itself from
    # the files the build stage copies, built by the locked setuptools, which then goes. Only the
    # bytecode compilation is left out (uv leaves it out unless asked): it checks nothing.
    uv_pip(venv, "install", "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(LOCK))
    context = root / "context"
    context.mkdir()
    for source in build_stage_sources():
        if source == LOCK.name:
            continue
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(
                origin, context / source, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]")
            )
        else:
            shutil.copy2(origin, context / source)
    uv_pip(venv, "install", "--no-deps", "--no-build-isolation", str(context))
    uv_pip(venv, "uninstall", "setuptools")
    (site_packages,) = (venv / "lib").glob("python3.*/site-packages")
    return LockedInstall(venv=venv, site_packages=site_packages)


def installed(install: LockedInstall) -> dict[str, metadata.Distribution]:
    return {
        canonicalize_name(d.metadata["Name"]): d
        for d in metadata.distributions(path=[str(install.site_packages)])
    }


@pytest.mark.slow
@pytest.mark.timeout(INSTALL_TIMEOUT + 60)
def test_the_locked_install_is_complete_and_nothing_more(locked: LockedInstall) -> None:
    """Every requirement of every installed package (with the extras asked for) is met, and
    every locked package is needed by something."""
    dists = installed(locked)
    assert dists["anvil"].version == __version__
    wanted: dict[str, set[str]] = {"anvil": set()}
    queue: list[tuple[str, set[str]]] = [("anvil", set())]
    while queue:
        name, extras = queue.pop()
        for text in dists[name].requires or []:
            requirement = Requirement(text)
            marker_envs = [{**TARGET, "extra": extra} for extra in extras or {""}]
            if requirement.marker is not None and not any(
                requirement.marker.evaluate(e) for e in marker_envs
            ):
                continue
            needed = canonicalize_name(requirement.name)
            assert needed in dists, f"{name} needs {requirement}, which the lock does not install"
            assert requirement.specifier.contains(Version(dists[needed].version), prereleases=True), (
                f"{name} needs {requirement}; the lock has {dists[needed].version}"
            )
            new_extras = set(requirement.extras) - wanted.get(needed, set())
            if needed not in wanted or new_extras:
                wanted[needed] = wanted.get(needed, set()) | set(requirement.extras)
                queue.append((needed, wanted[needed]))
    # setuptools is only the build backend, removed after the build as the image does.
    unused = set(dists) - set(wanted) - BOOTSTRAP
    assert not unused, f"locked but needed by nothing: {sorted(unused)}: regenerate requirements.lock"
    assert set(pins()) - BOOTSTRAP == set(dists) - {"anvil"} - BOOTSTRAP


@dataclass(frozen=True)
class LockedServer:
    """`anvil serve` running from the locked install: its base URL and its data folder."""

    url: str
    data_dir: Path


@pytest.fixture(scope="module")
def locked_server(locked: LockedInstall, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedServer]:
    """`anvil serve` from the locked environment with the image's store, on a free loopback port."""
    data_dir = tmp_path_factory.mktemp("locked-data")
    # Created here so a token can be minted for it; the server only reads it.
    DevIssuer.load_or_create(data_dir)
    with run_cosmos_server() as cosmos:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_") and k != "PYTHONPATH"}
        env.update(
            cosmos.env(),
            ANVIL_PORT=str(port),
            ANVIL_DATA_DIR=str(data_dir),
            ANVIL_LOG_LEVEL="warning",
            # As in the image: the docs as the corpus, beside (not inside) the installed package.
            ANVIL_CORPUS_DIR=str(ROOT / "docs"),
            ANVIL_COSMOS_CONTAINER=f"lock-{uuid.uuid4().hex[:8]}",
        )
        log_path = data_dir / "server.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [str(locked.venv / "bin" / "anvil"), "serve"],
                cwd=data_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_ready(url, process, log_path)
            yield LockedServer(url, data_dir)
        finally:
            stop(process)


@pytest.mark.slow
@pytest.mark.timeout(INSTALL_TIMEOUT + 60)
def test_anvil_from_the_lock_serves_and_answers(locked: LockedInstall, locked_server: LockedServer) -> None:
    imported = subprocess.run(
        [str(locked.venv / "bin" / "python"), "-c", "import app; print(app.__file__)"],
        cwd=locked.venv,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(imported.stdout.strip()).is_relative_to(locked.site_packages), (
        "the server runs the installed copy"
    )

    token = DevIssuer.load_or_create(locked_server.data_dir).mint("lock-user")
    with httpx.Client(base_url=locked_server.url, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        conversation = f"lock-{uuid.uuid4().hex}"
        reply = client.post(
            "/api/ask",
            json={"question": "How do I deploy Anvil?", "conversationId": conversation},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert reply.status_code == 200, reply.text
    envelope = reply.json()
    assert envelope["answer"].strip() and envelope["sources"]
    assert (envelope["conversationId"], envelope["turn"], envelope["created"]) == (conversation, 1, True)
