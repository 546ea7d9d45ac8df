"""`anvil index`: build a knowledge index from folders of documents, its passages embedded."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from app.cli import arguments

if TYPE_CHECKING:
    # Not at run time: `anvil --help` and `--version` build this command's parser, and the
    # settings import pydantic (most of a second of start-up).
    from app.settings import Settings


def say(message: str) -> None:
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()


def add_index_command(commands: Any, run: Callable[[argparse.Namespace], int]) -> None:
    """The `index` subcommand of the `anvil` parser, calling `run`."""
    p = commands.add_parser(
        "index",
        help="build a knowledge index from folders of documents, for ANVIL_INDEX",
        description="Index the documents of each SOURCE folder into one file that `anvil\n"
        "serve` opens (ANVIL_INDEX) instead of indexing a corpus at every start.",
        epilog="examples:\n  anvil index docs --output docs.anvilidx\n"
        "  anvil index handbook=https://handbook.example.com --output handbook.anvilidx\n"
        "  anvil index docs=https://docs.example.com --site-style mkdocs --output docs.anvilidx\n"
        '  anvil index handbook --output handbook.anvilidx --name "the Contoso handbook"\n'
        '  anvil index handbook --output handbook.anvilidx --description "leave, pay and travel"',
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sources",
        nargs="+",
        type=arguments.source_folder,
        metavar="SOURCE",
        help="a folder, or FOLDER=URL: the site its pages are published at, for citations with links",
    )
    p.add_argument("--output", required=True, type=arguments.index_target, metavar="TARGET", help="the file")
    p.add_argument(
        "--site-style",
        type=arguments.site_style,
        metavar="STYLE",
        help="the generator of the sites of FOLDER=URL, so that a citation opens its page and section: "
        "sphinx, sphinx-dirhtml, mkdocs, docusaurus, vitepress, github or html (default: sniffed from "
        "the folder, a conf.py is sphinx, a mkdocs.yml mkdocs, ...; else each document by its type)",
    )
    p.add_argument(
        "--embeddings",
        choices=("none", "local", "openai", "azure-openai"),
        help="the embedder of the passages' vectors (default: ANVIL_EMBEDDINGS, else local); "
        "a server serves the index only with the same one",
    )
    p.add_argument(
        "--name",
        type=arguments.text_of(120),
        metavar="NAME",
        help="what the knowledge is called, in the tools' descriptions and /readyz "
        "(default: the server's ANVIL_KNOWLEDGE_NAME, else the folder's name)",
    )
    p.add_argument(
        "--description",
        type=arguments.text_of(500),
        metavar="TEXT",
        help="what the knowledge covers, in one sentence, so that an agent knows when to ask",
    )
    p.add_argument(
        "--reuse",
        action="append",
        default=[],
        type=Path,
        metavar="INDEX",
        help="an earlier index whose vectors are reused for passages whose text is unchanged "
        "(the one at TARGET is, always); repeatable",
    )
    p.set_defaults(run=run)


def index(args: argparse.Namespace, settings: Settings) -> int:
    """Build one knowledge index from `args.sources` into `args.output`, its passages embedded
    by the embedder of `ANVIL_EMBEDDINGS` (or `--embeddings`); one summary line."""
    import time

    from app.cli.progress import IndexProgress, counted
    from app.engines.embeddings.factory import open_embedder
    from app.errors import AnvilError
    from app.knowledge.blob_build import build_to_blob
    from app.knowledge.build import build
    from app.knowledge.index_target import check_target

    started = time.monotonic()
    embedder = None
    stopped_by: list[int] = []
    sources = [replace(source, max_bytes=settings.max_document_bytes) for source in args.sources]
    if args.site_style is not None:
        if all(source.site is None for source in sources):
            say(
                f"anvil: cannot index: --site-style {args.site_style} says how a site names its pages, and "
                "no SOURCE names a site: give FOLDER=URL"
            )
            return 1
        sources = [replace(s, style=args.site_style) if s.site else s for s in sources]
    try:
        with _stopped_by_sigterm(stopped_by):
            # Before any document is read or embedded: a target that cannot be written fails now.
            check_target(args.output, sources)
            embedder = open_embedder(settings, settings)
            # A blob URL is built in a scratch folder and uploaded whole; a path is written in place.
            into = build_to_blob if isinstance(args.output, str) else build
            knowledge = {
                key: value for key, value in (("name", args.name), ("description", args.description)) if value
            }
            built = into(
                sources,
                args.output,
                IndexProgress(sys.stderr),
                embedder=embedder,
                previous=args.reuse,
                knowledge=knowledge,
            )
    except (OSError, ValueError, AnvilError) as error:
        say(f"anvil: cannot index: {error}")
        return 1
    except KeyboardInterrupt:
        kept = "" if embedder is None else "; any passages embedded so far are kept for the next build to it"
        say(f"anvil: stopped before {args.output} was written{kept}")
        return 128 + (stopped_by[0] if stopped_by else signal.SIGINT)
    finally:
        if embedder is not None:
            embedder.close()
    vectors = (
        "no vectors (embeddings: none)"
        if embedder is None
        else f"{counted(built.embedded or 0, 'passage')} embedded by {embedder.name}, "
        f"{built.passages - (built.embedded or 0):,} reused"
    )
    say(
        f"anvil: indexed {counted(built.files, 'file')} ({counted(built.passages, 'passage')}; {vectors}) "
        f"into {args.output}: "
        f"version {built.version}, {built.bytes / 1e6:.1f} MB, {time.monotonic() - started:.1f} s"
    )
    return 0


@contextmanager
def _stopped_by_sigterm(stopped_by: list[int]) -> Iterator[None]:
    """SIGTERM (a `docker stop`, a CI job cancelled) stops the build as Ctrl-C does, so that it
    keeps what it embedded (`resume`); the signal is put in `stopped_by`."""

    def stop(number: int, frame: FrameType | None) -> None:
        stopped_by.append(number)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can handle signals
        return
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
