"""Answer quality: ask Anvil sets of questions about corpora and score the sources it cites.

    .venv/bin/python bench/eval.py [--sets DIR] [--ranking lexical,vector,hybrid]
    .venv/bin/python bench/eval.py --corpus DIR --questions FILE [--ranking ...]
    .venv/bin/python bench/eval.py --corpus DIR --questions FILE --serve | --url URL [--token TOKEN]

The first form scores every set of `DIR` (default: the `eval` folder of the shared data beside
the checkout: each `NAME-questions.json` with its `NAME-docs/`) with each ranking, in process:
the embedded engine over the corpus's index, kept (with its vectors, embedded once by the
`local` embedder) under `.anvil/eval-cache/`, and a table at the end. The second scores one set:
those of `bench/questions/` are about corpora the ranking was never fitted on: Anvil's own docs
(`anvil.json`, `--corpus docs`), and undici's, npm's, fastify's, Flask's and pino's (`NAME.json`,
`--corpus .anvil/eval-sets/NAME-docs`, fetched by `bench/eval_sets.sh`).
With `--serve`, starts `anvil serve` on a free loopback port with `ANVIL_CORPUS_DIR=DIR`, a
scratch data folder and the other `ANVIL_*` settings of the environment (dev sign-in and the
embedded engine unless they say otherwise), waits until its passages are embedded, and always
stops it; with `--url`, asks that server instead (`--token`, or a dev token minted from
`--data-dir`, signs the conversation turns in).

The questions file holds `single` questions (`q` and the expected `file`), `off_topic` questions
(a good answer cites nothing) and `follow_ups` (`then` asked right after `first` in the same
conversation, answered from `file`). Every question goes to `POST /api/ask`:

- `single`: one-shot; hit@1 (the first source is the file) and hit@3 (among the first three).
- `off_topic`: one-shot, and as the second turn of a fresh conversation whose first turn is an
  on-topic question; refused when the answer cites no source.
- `follow_ups`: a fresh conversation per pair; right when the first source of `then` is `file`.

In process, a question goes to the engine as `POST /api/ask` would send it, with the
conversation's earlier turns.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import httpx

ROOT = Path(__file__).resolve().parent.parent
#: A first start over a large corpus embeds its passages (about 5 a second on 2 cores).
START_TIMEOUT = 3600.0
RANKINGS = ("lexical", "vector", "rrf", "hybrid")
SETS = ROOT.parent / "shared" / "eval"


@dataclass
class Scores:
    """Counts of hits and misses, with one line per miss."""

    hit1: int = 0
    hit3: int = 0
    single: int = 0
    refused_one_shot: int = 0
    refused_in_conversation: int = 0
    off_topic: int = 0
    follow_ups_right: int = 0
    follow_ups: int = 0
    #: Single questions whose expected page is quoted in the answer text (under its label).
    quoted: int = 0
    #: Answers that end on a colon, end a paragraph mid-sentence or carry markup, and why.
    flagged: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)


#: The label an embedded engine's quote is headed by: **Title > Section** ([file](url)) or (`file`).
LABEL = re.compile(r"^\*\*.*\*\* \((?:\[([^\]]+)\]\([^)\s]*\)|`([^`]+)`)\)$", re.M)
#: What no answer should carry: markup of a source format that reached the text.
MARKUP = re.compile(
    r"(?m)^:(?:orphan|tocdepth|nosearch):|\.\. [a-z-]+::|code-block::|:(?:ref|doc|class|func|meth|attr)"
    r":`|---cut---|\btwoslash\b|^Next: .*Previous: |^[-=~^]{5,}\s*$|\]\[\]|^\[[^\n]*\]: \S"
)


def quoted_pages(answer: str) -> list[str]:
    """The files an answer quotes, by the labels heading its quotes."""
    return [link or file for link, file in LABEL.findall(answer)]


def problems(answer: str) -> list[str]:
    """What is wrong with how an answer reads: it ends on a colon, a paragraph of it stops
    mid-sentence, or it carries a source format's markup."""
    found = []
    if answer.rstrip().endswith(":"):
        found.append("ends on a colon")
    blocks = [b.strip() for b in re.sub(r"```.*?```", "\n\n```\n\n", answer, flags=re.S).split("\n\n")]
    blocks = [b for b in blocks if b]
    for text, after in zip(blocks, [*blocks[1:], ""], strict=True):
        skipped = ("|", "- ", "* ", "**", "[…]", "#", ">", "    ", "```")
        if text.startswith(skipped) or text[0].isdigit() or text[-1] in ".!?:)`\"'*]>…\u201d\u2019\u00bb":
            continue
        # What stands over a code block, a list or a table introduces it ("Example", "These
        # consist of the following"), whether or not it ends on a colon; "Stability: 2 - Stable"
        # is a label: none of them is a cut sentence.
        label = len(text.split()) <= 5 and "\n" not in text and ": " in text
        if label or after.startswith(("```", "- ", "* ", "|", "1.")):
            continue
        found.append(f"a paragraph stops mid-sentence: ...{text[-40:]!r}")
    markup = MARKUP.search(answer)
    if markup:
        found.append(f"markup: {markup.group(0)!r}")
    return found


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def anvil_command() -> list[str]:
    """The `anvil` script next to this Python, else the module."""
    script = Path(sys.executable).with_name("anvil")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


def mint_token(data_dir: Path) -> str:
    """A dev token for the servers that share `data_dir`."""
    sys.path.insert(0, str(ROOT))
    from app.auth.dev import DevIssuer

    return DevIssuer.load_or_create(data_dir).mint("eval")


@contextmanager
def served(corpus: Path) -> Iterator[tuple[str, str]]:
    """Run `anvil serve` over `corpus` in a scratch data folder; yields its URL and a token."""
    with tempfile.TemporaryDirectory(prefix="anvil-eval-") as scratch:
        data_dir = Path(scratch)
        port = free_port()
        # Other ANVIL_* settings pass through, so a language-model engine can be measured too.
        env = dict(os.environ)
        env.update(
            {
                "ANVIL_CORPUS_DIR": str(corpus.resolve()),
                "ANVIL_DATA_DIR": str(data_dir),
                "ANVIL_PORT": str(port),
                "ANVIL_LOG_LEVEL": "warning",
            }
        )
        url = f"http://127.0.0.1:{port}"
        with (data_dir / "server.log").open("wb") as log:
            process = subprocess.Popen(
                [*anvil_command(), "serve"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            wait_until_ready(url, process, data_dir / "server.log")
            yield url, mint_token(data_dir)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_until_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll `/readyz` until it answers and every passage of its index has its vector (a first
    start embeds them in the background); fail with the server's log if it exits or never does."""
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"anvil serve exited with {process.returncode}:\n{log.read_text()}")
            try:
                reply = client.get(f"{url}/readyz")
                index = reply.json().get("index") or {} if reply.status_code == 200 else None
                if index is not None and (
                    not index.get("embedder") or index["embedded"] >= index["passages"]
                ):
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)  # readiness poll interval
    raise RuntimeError(f"anvil serve was not ready in {START_TIMEOUT}s:\n{log.read_text()}")


class Asker:
    """Asks questions over REST, one-shot or within a conversation."""

    def __init__(self, client: httpx.Client, url: str, token: str) -> None:
        self._client = client
        self._url = url
        self._headers = {"Authorization": f"Bearer {token}"}

    def ask(self, question: str, conversation_id: str | None = None) -> dict[str, Any]:
        """The `ask` envelope for `question`; one-shot unless a conversation is named."""
        body: dict[str, str] = {"question": question}
        if conversation_id is not None:
            body["conversationId"] = conversation_id
        response = self._client.post(f"{self._url}/api/ask", json=body, headers=self._headers)
        if response.is_error:
            raise SystemExit(f"eval: ask {question!r} failed with {response.status_code}: {response.text}")
        reply: dict[str, Any] = response.json()
        return reply


class Past(NamedTuple):
    question: str
    answer: str
    sources: tuple[str, ...] | None = None


class InProcess:
    """Asks the embedded engine directly, keeping each conversation's turns as the service does."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._turns: dict[str, list[Any]] = {}

    def ask(self, question: str, conversation_id: str | None = None) -> dict[str, Any]:
        import anyio

        history = self._turns.setdefault(conversation_id, []) if conversation_id else []
        answer = anyio.run(self._engine.answer, question, list(history))
        if conversation_id:
            cited = tuple(dict.fromkeys(p.source for p in answer.sources))
            history.append(Past(question, answer.text, cited))
        # One entry a page, as the envelope's `sources` has them (its sections inside).
        pages = dict.fromkeys(p.source for p in answer.sources)
        return {"answer": answer.text, "sources": [{"source": page} for page in pages]}


def engines(corpus: Path, rankings: list[str], cache_root: Path) -> dict[str, Any]:
    """The embedded engine over `corpus` for each ranking, sharing one index (with vectors) kept
    under `cache_root`."""
    sys.path.insert(0, str(ROOT))
    from app.engines.embeddings.local import LocalEmbedder
    from app.engines.retrieval.engine import RetrievalEngine
    from app.knowledge.corpus_cache import index_folder
    from app.knowledge.served import ServedIndex, naming_of
    from app.settings.engines import EngineSettings

    embedder = LocalEmbedder()
    cache = cache_root / corpus.resolve().name
    started = time.monotonic()
    index = index_folder(corpus, cache, embedder=embedder)
    print(f"eval: {corpus.name}: {index.passage_count} passages, ready in {time.monotonic() - started:.1f} s")
    # Named as the service names it: Anvil's own docs by their name, any other folder by its own.
    bundled = corpus.resolve() == (ROOT / "docs").resolve()
    naming = naming_of(EngineSettings(corpus_dir=None if bundled else corpus))
    served = ServedIndex(index, embedder.name, naming)
    return {ranking: RetrievalEngine(served, embedder, ranking=ranking) for ranking in rankings}


def sources(reply: dict[str, Any]) -> list[str]:
    """The files an answer cites, in order."""
    return [str(source["source"]) for source in reply.get("sources", [])]


def fresh_conversation() -> str:
    return f"eval-{uuid.uuid4().hex[:16]}"


def evaluate(asker: Asker, questions: dict[str, Any]) -> Scores:
    """Ask every question of the set and count what came back right."""
    scores = Scores()
    single = questions.get("single", [])
    for item in single:
        reply = asker.ask(item["q"])
        cited = sources(reply)
        answer = str(reply.get("answer", ""))
        scores.quoted += item["file"] in quoted_pages(answer)
        scores.flagged.extend(f"{item['q']!r}: {problem}" for problem in problems(answer))
        scores.single += 1
        scores.hit1 += bool(cited) and cited[0] == item["file"]
        scores.hit3 += item["file"] in cited[:3]
        if not cited or cited[0] != item["file"]:
            scores.misses.append(f"single     {item['q']!r}: want {item['file']}, got {cited[:3]}")
    for n, question in enumerate(questions.get("off_topic", [])):
        scores.off_topic += 1
        one_shot = sources(asker.ask(question))
        scores.refused_one_shot += not one_shot
        if one_shot:
            scores.misses.append(f"off-topic  {question!r} (one-shot): cited {one_shot[:3]}")
        conversation = fresh_conversation()
        if single:
            asker.ask(single[n % len(single)]["q"], conversation)
        in_conversation = sources(asker.ask(question, conversation))
        scores.refused_in_conversation += not in_conversation
        if in_conversation:
            scores.misses.append(f"off-topic  {question!r} (turn 2): cited {in_conversation[:3]}")
    for item in questions.get("follow_ups", []):
        conversation = fresh_conversation()
        asker.ask(item["first"], conversation)
        cited = sources(asker.ask(item["then"], conversation))
        scores.follow_ups += 1
        right = bool(cited) and cited[0] == item["file"]
        scores.follow_ups_right += right
        if not right:
            scores.misses.append(
                f"follow-up  {item['first']!r} -> {item['then']!r}: want {item['file']}, got {cited[:3]}"
            )
    return scores


def ratio(part: int, whole: int) -> str:
    return f"{part / whole:.2f} ({part}/{whole})" if whole else "n/a"


def report(scores: Scores) -> None:
    print(f"hit@1                      {ratio(scores.hit1, scores.single)}")
    print(f"hit@3                      {ratio(scores.hit3, scores.single)}")
    print(f"off-topic refused one-shot {ratio(scores.refused_one_shot, scores.off_topic)}")
    print(f"off-topic refused in conv. {ratio(scores.refused_in_conversation, scores.off_topic)}")
    print(f"follow-ups right           {ratio(scores.follow_ups_right, scores.follow_ups)}")
    print(f"expected page quoted       {ratio(scores.quoted, scores.single)}")
    print(f"answers flagged            {len(scores.flagged)}")
    for flag in scores.flagged:
        print(f"  {flag}")
    if scores.misses:
        print("misses:")
        for miss in scores.misses:
            print(f"  {miss}")


def table(rows: list[tuple[str, str, Scores]]) -> None:
    """The scores of every set and ranking, as the Markdown table of docs/evaluation.md."""
    print(
        "| set | ranking | hit@1 | hit@3 | off-topic refused | in a conversation | follow-ups | quoted "
        "| flagged |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, ranking, scores in rows:
        print(
            f"| {name} | {ranking} | {scores.hit1 / max(scores.single, 1):.2f} | "
            f"{scores.hit3 / max(scores.single, 1):.2f} | {scores.refused_one_shot}/{scores.off_topic} | "
            f"{scores.refused_in_conversation}/{scores.off_topic} | "
            f"{scores.follow_ups_right}/{scores.follow_ups} | {scores.quoted / max(scores.single, 1):.2f} | "
            f"{len(scores.flagged)} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sets", type=Path, default=SETS, help="folder of NAME-questions.json and NAME-docs/"
    )
    parser.add_argument("--corpus", type=Path, help="folder of documents to answer from")
    parser.add_argument("--questions", type=Path, help="JSON question set about --corpus")
    parser.add_argument("--ranking", default=",".join(RANKINGS), help="in process: comma-separated rankings")
    parser.add_argument("--serve", action="store_true", help="ask a server started over --corpus")
    parser.add_argument("--url", help="ask this running server instead of starting one")
    parser.add_argument("--token", help="bearer token for --url (default: minted from --data-dir)")
    parser.add_argument("--data-dir", type=Path, default=Path(".anvil"), help="data folder of --url's server")
    parser.add_argument("--misses", action="store_true", help="list every miss")
    parser.add_argument(
        "--cache",
        type=Path,
        default=ROOT / ".anvil" / "eval-cache",
        help="in process: where indexes are kept",
    )
    args = parser.parse_args()
    rankings = [r for r in args.ranking.split(",") if r]
    if any(r not in RANKINGS for r in rankings):
        parser.error(f"--ranking takes {', '.join(RANKINGS)}")
    if (args.corpus is None) != (args.questions is None):
        parser.error("--corpus and --questions go together")
    if args.corpus is not None and not args.corpus.is_dir():
        parser.error(f"--corpus {args.corpus} is not a directory")
    if args.url or args.serve:
        if args.questions is None:
            parser.error("--serve and --url need --corpus and --questions")
        questions = json.loads(args.questions.read_text(encoding="utf-8"))
        with httpx.Client(timeout=60.0) as client:
            if args.url:
                token = args.token or mint_token(args.data_dir)
                scores = evaluate(Asker(client, args.url.rstrip("/"), token), questions)
            else:
                with served(args.corpus) as (url, token):
                    scores = evaluate(Asker(client, url, token), questions)
        report(scores)
        return 0
    if args.questions is not None:
        sets = [(args.questions.stem.removesuffix("-questions"), args.corpus, args.questions)]
    else:
        found = sorted(args.sets.glob("*-questions.json"))
        sets = [
            (q.stem.removesuffix("-questions"), args.sets / f"{q.stem.removesuffix('-questions')}-docs", q)
            for q in found
        ]
        if not sets:
            parser.error(f"{args.sets} holds no NAME-questions.json with its NAME-docs/")
    rows: list[tuple[str, str, Scores]] = []
    for name, corpus, path in sets:
        questions = json.loads(path.read_text(encoding="utf-8"))
        for ranking, engine in engines(corpus, rankings, args.cache).items():
            scores = evaluate(InProcess(engine), questions)
            rows.append((name, ranking, scores))
            if args.misses:
                print(f"-- {name}, {ranking}")
                report(scores)
    table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
