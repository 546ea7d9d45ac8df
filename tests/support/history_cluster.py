"""The servers of the history model's rounds (`support.history_model`): `anvil serve` processes
sharing one store and one fake model, killed and restarted on the way, and the model's record
of which asks have reached it."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import anyio

from app.auth.dev import DevIssuer
from support.anvil_server import PASSED_THROUGH, AnvilServer, PortTaken, start_anvil, stop
from support.openai_server import FakeOpenAI, running_openai

StoreName = Literal["memory", "sqlite", "cosmos"]

#: History bounds far above what a round writes, so the model never has to drop a turn.
ROOMY = {
    "ANVIL_HISTORY_MAX_TURNS": "1000",
    "ANVIL_HISTORY_MAX_BYTES": "1048576",
    "ANVIL_MAX_CONVERSATIONS_PER_USER": "10000",
}

#: A corpus of one small file: retrieval stays cheap, and every answer still has a passage.
CORPUS = """# Conversations

A conversation keeps its turns in order. Deleting a conversation removes every turn of it, and
a later ask with the same id starts a new conversation.
"""

#: Longest wait for a killed process to serve again (`anvil_server` gives a start 60 s).
RESTART_TIMEOUT = 90.0
#: Longest wait for the asks of a burst to reach the model before its delete is sent anyway.
ARRIVAL_TIMEOUT = 10.0


# ---------------------------------------------------------------------------------------------
# The servers


def model_env(fake: FakeOpenAI, corpus: Path) -> dict[str, str]:
    """`ANVIL_*` settings that point `anvil serve` at the local OpenAI-protocol server."""
    return {
        "ANVIL_ANSWER_ENGINE": "openai",
        "ANVIL_OPENAI_BASE_URL": f"{fake.url}/v1",
        "ANVIL_OPENAI_MODEL": "local-model",
        "ANVIL_OPENAI_API_KEY": "sk-local-history-model",
        "ANVIL_CORPUS_DIR": str(corpus),
        "ANVIL_ANSWER_TIMEOUT_SECONDS": "30",
    }


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conversations.md").write_text(CORPUS, encoding="utf-8")
    return folder


class Cluster:
    """`size` `anvil serve` processes on one store (one data folder, so one SQLite file and one
    signing key), any of which can be killed with SIGKILL and started again.

    Use it as a context manager: every process it started is reaped on the way out.
    """

    def __init__(self, store: StoreName, size: int, data_dir: Path, env: Mapping[str, str]) -> None:
        if store == "memory" and size != 1:
            raise ValueError("the memory store lives in one process: run one")
        self.store = store
        self.size = size
        self.data_dir = data_dir
        self.env = {**env, "ANVIL_STORE": store}
        self._servers: list[AnvilServer | None] = [None] * size
        #: How many times each process was killed; an answer lost while it changed is explained.
        self.epochs = [0] * size
        #: When each killed incarnation, by (index, epoch), was reaped: nothing it did lands later.
        self.reaped_at: dict[tuple[int, int], float] = {}
        self.kills = 0
        self._issuer: DevIssuer | None = None

    def __enter__(self) -> Cluster:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The signing key every process loads, made before any starts, so none races to make it.
        self._issuer = DevIssuer.load_or_create(self.data_dir)
        try:
            if self.store == "cosmos":
                # The first creates the database and container; the others find them there (two
                # creating them at once could both find them missing, and one fail to create).
                self._start(0)
                self._start_all(range(1, self.size))
            else:
                # SQLite schema creation is one immediate transaction, safe for processes opening
                # a new file at once: they start side by side, each start mostly waiting on imports.
                self._start_all(range(self.size))
        except BaseException:
            self.close()
            raise
        return self

    def _start_all(self, indexes: range) -> None:
        if len(indexes) <= 1:
            for index in indexes:
                self._start(index)
            return
        with ThreadPoolExecutor(len(indexes)) as pool:
            starts = [pool.submit(self._start, index) for index in indexes]
        # Every start has ended (each records its process, so `close` reaps it); the first error.
        for start in starts:
            start.result()

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        running = [server for server in self._servers if server is not None]
        self._servers = [None] * len(self._servers)
        # All told to stop first, so their shutdowns overlap; then each is reaped.
        for server in running:
            server.process.terminate()
        for server in running:
            stop(server.process)

    def resize(self, size: int) -> None:
        """Run `size` processes from now on: start the missing ones, stop those past `size`.
        The store and every incarnation's log stay, so rounds run one after the other on one
        cluster (each in its own namespace) whatever their number of processes."""
        if self.store == "memory" and size != 1:
            raise ValueError("the memory store lives in one process: run one")
        if size < 1:
            raise ValueError("a cluster runs at least one process")
        for index in range(size, self.size):
            server = self._servers[index]
            if server is not None:
                stop(server.process)
            # A later start of this index is a new incarnation, with a log of its own.
            self.epochs[index] += 1
        missing = range(self.size, size)
        self._servers = self._servers[:size] + [None] * len(missing)
        self.epochs.extend(0 for _ in range(len(self.epochs), size))
        self.size = size
        # Its store exists by now (the first process made it), so the new ones start side by side.
        self._start_all(missing)

    def token(self, user: str, ttl: int = 3600) -> str:
        if self._issuer is None:
            self._issuer = DevIssuer.load_or_create(self.data_dir)
        return self._issuer.mint(user, ttl=ttl)

    def url(self, index: int) -> str | None:
        server = self._servers[index]
        return None if server is None else server.url

    def live(self) -> list[int]:
        return [i for i, server in enumerate(self._servers) if server is not None]

    async def wait_live(self) -> None:
        """Until some process is up (polled, with a deadline: a restart takes a second or two)."""
        deadline = time.monotonic() + RESTART_TIMEOUT
        while not self.live():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no process came back within {RESTART_TIMEOUT} s:\n{self.logs()}")
            await anyio.sleep(0.02)

    def logs(self, limit: int = 20) -> str:
        """The last records of every process's log (killed incarnations included), each an
        error's message and the last line of its traceback."""
        parts = []
        for path in sorted(self.data_dir.glob("p*.log")):
            records = [_log_record(line) for line in path.read_text(errors="replace").splitlines()]
            if records:
                parts.append(f"--- {path.name}\n" + "\n".join(records[-limit:]))
        return "\n".join(parts)

    async def kill_and_restart(self, index: int) -> None:
        """SIGKILL process `index`, reap it, and start it again (on another port)."""
        server = self._servers[index]
        if server is None:
            return
        # Marked dead before the signal, so every request cut off by it is known to be.
        self._servers[index] = None
        epoch = self.epochs[index]
        self.epochs[index] = epoch + 1
        server.process.kill()
        server.process.wait()
        self.reaped_at[(index, epoch)] = time.monotonic()
        self.kills += 1
        # Not abandoned on cancellation: `_start` records the process itself, so it is reaped.
        await anyio.to_thread.run_sync(self._start, index)

    def _start(self, index: int) -> None:
        name = f"p{index}-{self.epochs[index]}"
        for attempt in range(3):
            try:
                self._servers[index] = start_anvil(self.data_dir, self._full_env(), name)
                return
            except PortTaken:
                if attempt == 2:
                    raise

    def _full_env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_") or k in PASSED_THROUGH}
        return {
            **base,
            "ANVIL_DATA_DIR": str(self.data_dir),
            "ANVIL_LOG_LEVEL": "warning",
            **ROOMY,
            **self.env,
        }


def _log_record(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return line[:300]
    if not isinstance(record, dict):
        return line[:300]
    text = f"{record.get('time', '')} {record.get('level', '')} {record.get('message', '')}"
    exception = str(record.get("exception") or "").strip().splitlines()
    return f"{text} | {exception[-1]}" if exception else text


@contextmanager
def model_server(delay: Callable[[], float] | float) -> Iterator[FakeOpenAI]:
    """The local OpenAI-protocol server, answering every request after `delay` seconds."""
    with running_openai() as fake:
        fake.delay = delay
        yield fake


class Arrivals:
    """Which questions have reached the model: the question ends the last message of both the
    standalone-query request and the answer request the `openai` engine sends."""

    def __init__(self, fake: FakeOpenAI) -> None:
        self._fake = fake
        self._seen = len(fake.requests)
        self._questions: set[str] = set()

    def _scan(self) -> None:
        requests = self._fake.requests
        end = len(requests)
        for request in requests[self._seen : end]:
            content = str(request.messages[-1].get("content", ""))
            for marker in ("Last question: ", "Question: "):
                _, found, tail = content.rpartition(marker)
                if found:
                    self._questions.add(tail)
                    break
        self._seen = end

    async def wait_for(
        self,
        questions: Sequence[str],
        seconds: float = ARRIVAL_TIMEOUT,
        settled: Callable[[str], bool] = lambda _: False,
    ) -> bool:
        """Whether all `questions` reached the model (or are `settled`: answered without it, or
        cut off) within `seconds` (polled)."""
        deadline = time.monotonic() + seconds
        while True:
            self._scan()
            if all(q in self._questions or settled(q) for q in questions):
                return True
            if time.monotonic() > deadline:
                return False
            await anyio.sleep(0.005)  # polling interval of a condition with a deadline
