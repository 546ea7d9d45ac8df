"""The knowledge index against corpus size: building it at every start, against opening it.

    .venv/bin/python bench/knowledge.py collect --into CORPUS --mb 100 ROOT...
    .venv/bin/python bench/knowledge.py run --corpus CORPUS [--sizes 1,5,15,37,74,100]

`collect` copies real documents (the endings Anvil reads) found under each ROOT into CORPUS,
keeping their paths, each distinct text once, until CORPUS holds about `--mb` megabytes.

`run` takes, for each size, the first files of CORPUS (in path order) up to that many megabytes,
and measures side by side, each `anvil serve` pinned to core 1 with a new data folder:
- building at start-up: `ANVIL_CORPUS_DIR` set, exec to the first answered `ask`, and peak RSS;
- the restart over the unchanged folder (its index kept in the data folder);
- `anvil index` (its time and the size of the file) and `ANVIL_INDEX` set: exec to the first
  answered `ask`, and peak RSS.
At the largest size it then drives one-shot asks at the opened index (1 connection, then 16; 5 s
each) for p50 and p99. The figures are printed as a table, and plotted (start-up and peak RSS against
corpus size, both ways) into an SVG file (`--plot`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, Server, drive, free_port, pinned, post
from run import ANVIL, anvil_token

SUFFIXES = (".md", ".mdx", ".rst", ".html", ".htm", ".txt")
MB = 1_000_000


def collect(into: Path, megabytes: float, roots: list[Path]) -> None:
    seen: set[str] = set()
    total = 0
    for root in roots:
        for path in sorted(root.rglob("*")):
            if total >= megabytes * MB:
                break
            if not path.name.endswith(SUFFIXES) or not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
            digest = hashlib.sha256(data).hexdigest()
            if digest in seen or len(data) < 200 or len(data) > 2 * MB:
                continue
            seen.add(digest)
            target = into / root.name / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            total += len(data)
    print(f"collected {len(seen)} documents, {total / MB:.1f} MB, into {into}")


def subset(corpus: Path, megabytes: float, into: Path) -> tuple[int, int]:
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
    total = count = 0
    for path in files:
        if total >= megabytes * MB:
            break
        target = into / path.relative_to(corpus)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        total += path.stat().st_size
        count += 1
    return count, total


@dataclass
class Start:
    seconds: float
    peak_rss_mib: float


def start(env: dict[str, str], data_dir: Path, *, keep: bool = False) -> tuple[Start, Server | None]:
    """Exec `anvil serve` to its first answered ask; its peak RSS then. With `keep`, the server is
    handed back running (the caller stops it)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    token = anvil_token(data_dir)
    port = free_port()
    full = {k: v for k, v in os.environ.items() if not k.startswith("ANVIL_")}
    full.update(
        {"ANVIL_DATA_DIR": str(data_dir), "ANVIL_PORT": str(port), "ANVIL_LOG_LEVEL": "warning", **env}
    )
    log = (data_dir / "server.log").open("wb")
    started = time.perf_counter()
    process = subprocess.Popen(pinned(1, [ANVIL, "serve"]), env=full, cwd=ROOT, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                post(f"{url}/mcp", "modern", token)
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if process.poll() is not None:
                    raise RuntimeError((data_dir / "server.log").read_text()) from None
                time.sleep(0.01)  # connection poll interval
        took = time.perf_counter() - started
        status = Path(f"/proc/{process.pid}/status").read_text()
        peak = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024
        if keep:
            return Start(took, peak), Server("index", f"{url}/mcp", process, token)
    except BaseException:
        process.terminate()
        process.wait(10)
        raise
    process.terminate()
    process.wait(10)
    return Start(took, peak), None


def open_seconds(target: Path) -> float:
    """`PassageIndex.open` of `target` (a private copy, checked, the lookups built), in a fresh
    interpreter, without the rest of a server's start."""
    code = (
        "import sys, time, tempfile; from pathlib import Path;"
        "from app.knowledge.index import PassageIndex;"
        "t = time.perf_counter();"
        "PassageIndex.open(Path(sys.argv[1]), copy_to=Path(tempfile.gettempdir()));"
        "print(time.perf_counter() - t)"
    )
    ran = subprocess.run(
        pinned(1, [sys.executable, "-c", code, str(target)]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(ran.stdout)


def run(corpus: Path, sizes: list[float], plot: Path) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="anvil-knowledge-") as scratch_name:
        scratch = Path(scratch_name)
        for size in sizes:
            folder = scratch / f"corpus-{size:g}"
            files, nbytes = subset(corpus, size, folder)
            built = start({"ANVIL_CORPUS_DIR": str(folder)}, scratch / f"build-{size:g}")[0]
            cached = start({"ANVIL_CORPUS_DIR": str(folder)}, scratch / f"build-{size:g}")[0]
            target = scratch / f"index-{size:g}.anvilidx"
            began = time.perf_counter()
            subprocess.run(
                [ANVIL, "index", str(folder), "--output", str(target)], check=True, capture_output=True
            )
            index_seconds = time.perf_counter() - began
            opening = min(open_seconds(target) for _ in range(3))
            last = size == sizes[-1]
            opened, server = start({"ANVIL_INDEX": str(target)}, scratch / f"open-{size:g}", keep=last)
            load = None
            if server is not None:
                try:
                    load = (
                        drive(server, flow="modern", ids=0, seconds=5, connections=1),
                        drive(server, flow="modern", ids=0, seconds=5),
                    )
                finally:
                    server.process.terminate()
                    server.process.wait(10)
            rows.append(
                (
                    size,
                    files,
                    nbytes,
                    built,
                    cached,
                    index_seconds,
                    target.stat().st_size,
                    opened,
                    load,
                    opening,
                )
            )
            shutil.rmtree(folder)
            print(f"{nbytes / MB:6.1f} MB done", file=sys.stderr)
    print()
    print(
        "| corpus | files | build at start | RSS | restart (cached) | `anvil index` | index file "
        "| serve from the index | RSS | serve / build | opening it |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for _, files, nbytes, built, cached, index_seconds, index_bytes, opened, _, opening in rows:
        ratio = opened.seconds / built.seconds
        print(
            f"| {nbytes / MB:.1f} MB | {files} | {built.seconds:.2f} s | {built.peak_rss_mib:.0f} MiB "
            f"| {cached.seconds:.2f} s | {index_seconds:.1f} s | {index_bytes / MB:.1f} MB "
            f"| {opened.seconds:.2f} s | {opened.peak_rss_mib:.0f} MiB | {ratio:.2f}x | {opening:.2f} s |"
        )
    load = rows[-1][-2]
    if load is not None:
        for connections, result in zip((1, 16), load, strict=True):
            print(
                f"one-shot asks at the opened index of {rows[-1][2] / MB:.1f} MB, {connections} "
                f"connection{'s' if connections > 1 else ''}: p50 {result.p50_ms:.1f} ms, "
                f"p99 {result.p99_ms:.1f} ms, {result.calls_per_second:.0f} asks/s, {result.errors} errors"
            )
    write_plot(plot, rows)
    print(f"plot: {plot}")


def write_plot(path: Path, rows: list[tuple]) -> None:  # type: ignore[type-arg]
    """Two panels, start-up seconds and peak RSS against corpus megabytes: a small hand-made SVG."""
    xs = [r[2] / MB for r in rows]
    series = {
        "start-up, building at start (s)": [r[3].seconds for r in rows],
        "start-up, cached restart (s)": [r[4].seconds for r in rows],
        "start-up, opening the index (s)": [r[7].seconds for r in rows],
        "peak RSS, building at start (MiB)": [r[3].peak_rss_mib for r in rows],
        "peak RSS, opening the index (MiB)": [r[7].peak_rss_mib for r in rows],
    }
    colours = ["#c0392b", "#e67e22", "#2471a3", "#c0392b", "#2471a3"]
    width, height, pad = 420, 300, 50
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" height="{height + 60}" font-size="11">'
    ]
    for panel, names in enumerate((list(series)[:3], list(series)[3:])):
        left = panel * width
        top = max(max(series[n]) for n in names) * 1.1 or 1
        right = max(xs) * 1.05 or 1

        def point(x: float, y: float, left: int = left, top: float = top, right: float = right) -> str:
            across = left + pad + x / right * (width - 2 * pad)
            up = height - pad - y / top * (height - 2 * pad)
            return f"{across:.1f},{up:.1f}"

        parts.append(
            f'<polyline fill="none" stroke="#000" points="{point(0, top)} {point(0, 0)} {point(right, 0)}"/>'
        )
        parts.append(f'<text x="{left + width / 2 - 40}" y="{height - 15}">corpus (MB)</text>')
        for tick in range(5):
            value = top / 1.1 * tick / 4
            x, y = point(0, value).split(",")
            parts.append(
                f'<text x="{float(x) - 40}" y="{y}">{value:.0f}</text>'
                if top > 10
                else f'<text x="{float(x) - 40}" y="{y}">{value:.1f}</text>'
            )
        for x_value in xs:
            x, y = point(x_value, 0).split(",")
            parts.append(f'<text x="{float(x) - 8}" y="{float(y) + 14}">{x_value:.0f}</text>')
        for n, name in enumerate(names):
            colour = colours[list(series).index(name)]
            dash = ' stroke-dasharray="4 3"' if "cached" in name else ""
            line = " ".join(point(x, y) for x, y in zip(xs, series[name], strict=True))
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{line}"/>')
            parts.append(f'<text x="{left + pad}" y="{height + 15 + 14 * n}" fill="{colour}">{name}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("collect")
    p.add_argument("--into", type=Path, required=True)
    p.add_argument("--mb", type=float, default=100)
    p.add_argument("roots", type=Path, nargs="+")
    p = commands.add_parser("run")
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--sizes", default="1,5,15,37,74,100")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "knowledge-scaling.svg")
    args = parser.parse_args()
    if args.command == "collect":
        collect(args.into, args.mb, args.roots)
    else:
        run(args.corpus, [float(s) for s in args.sizes.split(",")], args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
