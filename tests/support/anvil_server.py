"""Start a real `anvil serve` process on a free loopback port, and always reap it."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.auth.dev import DevIssuer
from support.preloaded_anvil import preloaded_anvil_command

START_TIMEOUT = 60.0


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def anvil_command() -> list[str]:
    """The installed `anvil` console script next to this Python, else the module."""
    script = Path(sys.executable).with_name("anvil")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


@dataclass
class AnvilServer:
    """A running server: its base URL, data dir and log file."""

    url: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def token(self, user: str, **kwargs: object) -> str:
        """A dev token this server accepts (the same key `anvil token` uses)."""
        return DevIssuer.load_or_create(self.data_dir).mint(user, **kwargs)  # type: ignore[arg-type]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_until_ready(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Poll `/healthz` until it answers; fail fast with the log if the process exits."""
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"anvil serve exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # polling interval of a readiness probe, not synchronisation
    raise RuntimeError(f"anvil serve did not become ready in {START_TIMEOUT}s:\n{log_path.read_text()}")


class PortTaken(RuntimeError):
    """Another process took the free port between our probe and the server's bind."""


def start_anvil(
    data_dir: Path,
    env: Mapping[str, str],
    name: str = "server",
    prefix: Sequence[str] = (),
    *,
    fresh: bool = False,
) -> AnvilServer:
    """Start one `anvil serve` on a free port and wait until it is ready (the caller reaps it).

    Its output goes to `<data_dir>/<name>.log`, so several servers can share one data folder.
    `prefix` goes before the command (`support.file_modes.bound_by_file_modes()`).

    The server is a child of the preloaded interpreter (`support.preloaded_anvil`): a process of
    its own, with its own output, signals and exit status, that skips importing the server's
    libraries (about 1.9 s of CPU a start). `process` is then the relay in front of it, whose
    signals reach the server and which exits as the server did. With `fresh` (and always with a
    `prefix`) it is the console script itself, for tests that look at the server process
    (`/proc/<pid>`).
    """
    port = int(env.get("ANVIL_PORT") or free_port())
    full_env = {**env, "ANVIL_PORT": str(port)}
    _seed_docs_index(data_dir, full_env)
    log_path = data_dir / f"{name}.log"
    command = [*prefix, *anvil_command()] if fresh or prefix else preloaded_anvil_command()
    with log_path.open("wb") as log:
        process = subprocess.Popen([*command, "serve"], env=full_env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, process, log_path)
    except RuntimeError:
        stop(process)
        if "already in use" in log_path.read_text(errors="replace"):
            raise PortTaken(url) from None
        raise
    return AnvilServer(url=url, data_dir=data_dir, log_path=log_path, process=process)


def stop(process: subprocess.Popen[Any]) -> None:
    """Terminate, then kill if it does not exit in time; always wait for it."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


#: Settings the suite's own environment hands on to the servers it starts (none today).
PASSED_THROUGH: frozenset[str] = frozenset()
#: Settings every test server and command starts with unless its test names them: ranking by
#: words alone, since a server embedding its corpus in the background would keep both cores busy
#: for its whole life. The tests of embeddings set ANVIL_EMBEDDINGS themselves.
TEST_DEFAULTS = {"ANVIL_EMBEDDINGS": "none"}


@contextmanager
def run_anvil(
    data_dir: Path,
    env: Mapping[str, str] | None = None,
    name: str = "server",
    prefix: Sequence[str] = (),
    *,
    fresh: bool = False,
) -> Iterator[AnvilServer]:
    """Run `anvil serve` with `env` on top of a clean ANVIL_* environment (but for the settings
    the whole suite is run under, `PASSED_THROUGH`)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # as Anvil makes it: no warning that it is open
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_") or k in PASSED_THROUGH}
    full_env = {
        **base_env,
        **TEST_DEFAULTS,
        "ANVIL_DATA_DIR": str(data_dir),
        "ANVIL_LOG_LEVEL": "warning",
        **(env or {}),
    }
    for attempt in range(3):
        try:
            server = start_anvil(data_dir, full_env, name, prefix, fresh=fresh)
            break
        except PortTaken:
            if attempt == 2 or "ANVIL_PORT" in (env or {}):
                raise
    try:
        yield server
    finally:
        stop(server.process)


@functools.cache
def _docs_index() -> Path:
    """The bundled docs' index, built once per test process by the product's own cache."""
    from app.knowledge.corpus_cache import index_folder
    from app.settings.engines import EngineSettings

    cache = Path(tempfile.mkdtemp(prefix="anvil-docs-index-"))
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    index_folder(EngineSettings().corpus_path(), cache).close()
    (built,) = cache.iterdir()
    return built


def _seed_docs_index(data_dir: Path, env: Mapping[str, str]) -> None:
    """A server over the bundled docs (the default corpus) finds their index already kept in its
    data folder, as after its first start: building it costs about 0.8 s of CPU a server, and
    the tests that start with no index kept name their own corpus (ANVIL_CORPUS_DIR)."""
    if "ANVIL_CORPUS_DIR" in env or "ANVIL_INDEX" in env or env.get("ANVIL_ANSWER_ENGINE") == "echo":
        return
    cache = data_dir / "index-cache"
    if cache.exists():
        return
    cache.mkdir(mode=0o700, parents=True)
    shutil.copyfile(_docs_index(), cache / _docs_index().name)
    (cache / _docs_index().name).chmod(0o600)


def anvil_run(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """`anvil ARGS` to its end, with only the given ANVIL_ variables set (a child of the
    preloaded interpreter), its output captured as text."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")} | TEST_DEFAULTS | env
    return subprocess.run(
        [*preloaded_anvil_command(), *args],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
