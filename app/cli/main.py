"""The `anvil` command line: its parser (one subcommand per command, each with a description and
examples) and `main`, which runs the command chosen (`app.cli.commands`)."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from app import __version__
from app.cli import arguments, commands
from app.cli.arguments import DEFAULT_URL

#: Exit status when standard output was closed before everything was written to it: 128 + SIGPIPE
#: (13), what a shell reports for `cat` or `grep` in the same place (a literal: Windows has no
#: SIGPIPE).
EXIT_CLOSED_PIPE = 141


def _url_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--url",
        type=arguments.server_url,
        default=os.environ.get("ANVIL_URL") or DEFAULT_URL,
        help=f"{what} (default: ANVIL_URL, else {DEFAULT_URL})",
    )


def command(
    subcommands: Any, name: str, summary: str, description: str, examples: Sequence[str]
) -> argparse.ArgumentParser:
    """A subcommand with a one-line `summary` (in `anvil --help`), a `description` and examples
    (in its own `--help`)."""
    return subcommands.add_parser(  # type: ignore[no-any-return]
        name,
        help=summary,
        # Wrapped here: the raw formatter keeps the examples' lines as written, and the text too.
        description=textwrap.fill(description, 79),
        epilog="examples:\n" + "\n".join(f"  {example}" for example in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    """The `anvil` argument parser, with one subcommand per command. Building it imports none of
    the server (`anvil --help` and `--version` answer at once)."""
    parser = argparse.ArgumentParser(
        prog="anvil",
        description="Anvil: a sessionless MCP service that answers questions from your documents "
        "and keeps conversation history. `anvil COMMAND --help` says more of each command.",
    )
    parser.add_argument("--version", action="version", version=f"anvil {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = command(
        subcommands,
        "serve",
        "run the HTTP server (MCP at /mcp, REST at /api)",
        "Run Anvil until Ctrl-C or SIGTERM: MCP at /mcp and REST at /api, answering from the "
        "documents of ANVIL_CORPUS_DIR (default: Anvil's own docs) or of ANVIL_INDEX. Every other "
        "setting is an ANVIL_* variable (docs/configuration.md).",
        ["anvil serve", "anvil serve --port 8080", "ANVIL_CORPUS_DIR=./handbook anvil serve"],
    )
    p.add_argument("--host", help="address to listen on (default: ANVIL_HOST, else 127.0.0.1)")
    p.add_argument("--port", type=arguments.port, help="port to listen on (default: ANVIL_PORT, else 8000)")
    p.set_defaults(run=commands.serve)

    from app.cli.index import add_index_command

    add_index_command(subcommands, commands.index)

    p = command(
        subcommands,
        "token",
        "print a dev access token (ANVIL_AUTH_MODE=dev only)",
        "Print an access token for a user, signed with the dev key in the data folder: only a "
        "server with ANVIL_AUTH_MODE=dev (the default, on loopback) and the same ANVIL_DATA_DIR "
        "accepts it. Production sign-in is Microsoft Entra ID (`anvil login`).",
        ["anvil token --user alice", 'curl -H "Authorization: Bearer $(anvil token --user alice)" ...'],
    )
    p.add_argument("--user", required=True, help="user name; the same name always maps to the same user")
    p.add_argument("--tenant", help="tenant id (default: the dev tenant)")
    p.add_argument("--scope", action="append", help="delegated scope (repeatable; default: access_as_user)")
    p.add_argument(
        "--ttl",
        type=arguments.ttl,
        default=3600,
        help="lifetime in seconds, 1 second to 30 days (default: 3600)",
    )
    p.set_defaults(run=commands.token)

    p = command(
        subcommands,
        "ask",
        "ask a running server a question (REST POST /api/ask)",
        "Ask the Anvil at --url a question and print the answer and its sources. With --conversation, "
        "the question continues (or starts) that conversation of the signed-in user.",
        [
            'anvil ask "How do I change the port?"',
            'anvil ask --conversation readme-demo "And where is the data kept?"',
        ],
    )
    p.add_argument(
        "question", type=arguments.question, metavar="QUESTION", help="the question, in plain words"
    )
    _url_argument(p, "the server's base URL")
    p.add_argument(
        "--conversation",
        type=arguments.conversation_id,
        metavar="ID",
        help="continue (or start) this conversation: 1-64 letters, digits, '.', '_' or '-'",
    )
    p.add_argument(
        "--instructions",
        metavar="TEXT",
        help="instructions for the answer (with --conversation, only when it starts the conversation)",
    )
    p.add_argument("--json", action="store_true", help="print the whole answer envelope as JSON")
    p.add_argument(
        "--token",
        help="bearer token (default: ANVIL_TOKEN, else what the server asks for: none, a dev token "
        "for a local dev server, or the user signed in with `anvil login`)",
    )
    p.set_defaults(run=commands.ask)

    p = command(
        subcommands,
        "bridge",
        "serve MCP on stdin/stdout for a host, forwarding to a remote Anvil",
        "A stdio MCP server for hosts that only start local servers: every request goes to the "
        "Anvil at --url over Streamable HTTP, signed in as the user (see `anvil login`).",
        ["anvil bridge --url https://anvil.example.com"],
    )
    _url_argument(p, "the server's base URL or its /mcp endpoint")
    p.add_argument(
        "--token",
        help="bearer token (default: ANVIL_TOKEN, else a dev token for a local dev server, "
        "else the user signed in with `anvil login`)",
    )
    p.set_defaults(run=commands.bridge)

    for name, run, summary in (
        ("login", commands.login, "sign in to a server with Microsoft Entra (web browser or device code)"),
        ("logout", commands.logout, "forget the user signed in to a server, and their tokens"),
    ):
        example = "anvil login --url https://anvil.example.com" if name == "login" else "anvil logout"
        p = command(subcommands, name, summary, f"{summary[0].upper()}{summary[1:]}.", [example])
        _url_argument(p, "the server's base URL or its /mcp endpoint")
        if name == "login":
            p.add_argument("--status", action="store_true", help="only show who is signed in")
            p.add_argument(
                "--device-code",
                action="store_true",
                help="sign in with a code entered on another device, even where a browser could open",
            )
        p.set_defaults(run=run)

    p = command(
        subcommands,
        "openapi",
        "print the OpenAPI document",
        "Print the REST API's OpenAPI document: 3.1 as /openapi.json serves it, or 3.0.3 for "
        "importing into Azure API Management.",
        ["anvil openapi > openapi.json", "anvil openapi --openapi-version 3.0 > apim.json"],
    )
    p.add_argument(
        "--openapi-version",
        choices=("3.1", "3.0"),
        default="3.1",
        help="3.1: the document /openapi.json serves (default); 3.0: OpenAPI 3.0.3 for API Management, "
        "with Entra ID sign-in as an oauth2 scheme",
    )
    p.set_defaults(run=commands.openapi)
    return parser


def _closed_pipe(error: BaseException) -> bool:
    """Whether `error` is only a closed pipe: a `BrokenPipeError`, or a task group's (the bridge's
    stdio tasks) holding nothing else."""
    if isinstance(error, BaseExceptionGroup):
        return all(_closed_pipe(inner) for inner in error.exceptions)
    return isinstance(error, BrokenPipeError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `anvil` command line with `argv` (default: the process's arguments)."""
    try:
        try:
            args = build_parser().parse_args(argv)
            result: int = args.run(args)
        finally:
            # Here, also after `--help` or `--version` (which exit): a pipe closed before the
            # buffered output went out fails in this `try`, not in the interpreter's flush at
            # exit, which would print "Exception ignored ..." on stderr.
            sys.stdout.flush()
    except (BrokenPipeError, BaseExceptionGroup) as error:
        if not _closed_pipe(error):
            raise
        # The reader went away (`anvil ask ... | head -c 10`): nothing more can be said to it, and
        # a traceback on stderr would only hide what the reader did print. Whatever is still
        # buffered goes to devnull, so the flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        # 141 rather than 1: `set -o pipefail` scripts that let a closed pipe pass for `cat` or
        # `grep` (status 141) then treat anvil alike, and 1 would read as a failure of anvil's own.
        return EXIT_CLOSED_PIPE
    return result


if __name__ == "__main__":
    sys.exit(main())
