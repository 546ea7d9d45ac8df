"""The `anvil` command: serve, index, token, ask, bridge, login, logout, openapi."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from app import __version__
from app.cli import arguments
from app.cli.arguments import DEFAULT_URL

if TYPE_CHECKING:
    from app.client.signin import UserSignIn
    from app.settings import Settings

#: Variables the command line reads for itself (`anvil ask`), not server settings: exporting
#: them must not make the server refuse to start as if they were misspelt settings.
CLIENT_VARIABLES = frozenset({"ANVIL_URL", "ANVIL_TOKEN", "ANVIL_TOKEN_CACHE", "ANVIL_SIGN_IN_CLIENT_ID"})
#: Exit status when standard output was closed before everything was written to it: 128 + SIGPIPE
#: (13), what a shell reports for `cat` or `grep` in the same place (a literal: Windows has no
#: SIGPIPE).
EXIT_CLOSED_PIPE = 141


def _say(message: str) -> None:
    """Tell the user something on stderr (stdout carries results, or the bridge's protocol)."""
    print(message, file=sys.stderr, flush=True)


def _settings(**overrides: Any) -> Settings:
    """Settings from the environment plus command-line overrides; exits with one line if invalid."""
    from pydantic import ValidationError

    from app.settings import Settings, describe_error, unknown_variables

    unknown = [name for name in unknown_variables(os.environ) if name.upper() not in CLIENT_VARIABLES]
    if unknown:
        _say(
            f"anvil: invalid configuration: unknown setting {', '.join(unknown)}; "
            "see docs/configuration.md for the names"
        )
        raise SystemExit(2)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as error:
        _say(f"anvil: invalid configuration: {describe_error(error)}")
        raise SystemExit(2) from None


def serve(args: argparse.Namespace) -> int:
    """Run the HTTP server until interrupted (`app.serve.server`)."""
    # Off until the server has started, from before the app is imported: see `app.serve.server.serve`.
    gc.disable()
    settings = _settings(host=args.host, port=args.port)
    from app.serve.server import serve as serve_app
    from app.telemetry.setup import TelemetryError

    try:
        return serve_app(settings)
    except TelemetryError as error:
        _say(f"anvil: invalid telemetry configuration: {error}")
        return 2


def _index(args: argparse.Namespace) -> int:
    from app.cli.index import index

    return index(args, _settings(embeddings=args.embeddings))


def token(args: argparse.Namespace) -> int:
    """Print a dev access token for `--user`, valid for servers sharing this data dir.

    Only the token goes to stdout (scripts capture it); stderr names the key it was signed with,
    and warns when that key was only just created, since no running server knows it yet.
    """
    settings = _settings()
    if settings.auth_mode != "dev":
        _say(f"anvil: `anvil token` mints dev tokens, but ANVIL_AUTH_MODE is {settings.auth_mode!r}")
        return 2
    from app.devkey import DEV_SCOPE, KEY_FILE_NAME, DevKey, user_oid

    data_dir = settings.data_dir.resolve()
    created = not (data_dir / KEY_FILE_NAME).exists()
    try:
        user_oid(args.user)  # a bad user name must not leave a new key behind
        minted = DevKey.load_or_create(data_dir).mint(
            args.user, tenant=args.tenant, scopes=args.scope or [DEV_SCOPE], ttl=args.ttl
        )
    except ValueError as error:
        _say(f"anvil: {error}")
        return 2
    _say(f"anvil: signing with the dev key in {data_dir} ({KEY_FILE_NAME})")
    if created:
        _say(
            f"anvil: warning: {data_dir} held no dev key, so a new one was created; a server using another "
            "data folder will refuse this token (run both with the same ANVIL_DATA_DIR)"
        )
    print(minted)
    return 0


def ask(args: argparse.Namespace) -> int:
    """Ask the server a question over REST and print the answer with its sources."""
    from app.client.errors import EXIT_SIGN_IN, ClientError
    from app.client.rest import ask as ask_server
    from app.client.rest import render_answer
    from app.client.tokens import choose

    try:
        choice = choose(args.url, args.token, lambda: _settings().data_dir)
        bearer = choice.source.get(False) if choice.source is not None else None
    except ClientError as problem:
        _say(f"anvil: {problem.message}")
        return problem.exit_code
    except Exception as error:  # the token source's own one-line reason (the dev key)
        _say(f"anvil: {error}")
        return EXIT_SIGN_IN
    try:
        envelope = ask_server(
            args.url,
            args.question,
            conversation_id=args.conversation,
            instructions=args.instructions,
            token=bearer,
        )
    except ClientError as error:
        message = error.message
        if error.exit_code == EXIT_SIGN_IN and choice.hint:
            message = f"{message} ({choice.hint})"
        _say(f"anvil: {message}")
        return error.exit_code
    if args.json:
        print(json.dumps(envelope, indent=2, ensure_ascii=False))
        return 0
    print(render_answer(envelope))
    note = envelope.get("note")
    if args.conversation is not None and isinstance(note, str) and note:
        _say(f"anvil: note: {note}")
    return 0


def bridge(args: argparse.Namespace) -> int:
    """Serve MCP on stdin/stdout for a host, forwarding every request to the server at `--url`."""
    import anyio

    from app.client.bridge import mcp_endpoint, serve_stdio
    from app.client.errors import ClientError
    from app.client.tokens import choose

    url = mcp_endpoint(args.url)
    try:
        choice = choose(args.url, args.token, lambda: _settings().data_dir)
        if choice.sign_in is not None:
            from app.client.signin import ensure_signed_in

            ensure_signed_in(choice.sign_in, say=lambda message: _say(f"anvil: {message}"))
        anyio.run(serve_stdio, url, choice.source, choice.hint)
    except ClientError as error:
        _say(f"anvil bridge: {error.message}")
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


def login(args: argparse.Namespace) -> int:
    """Sign in to the server at `--url` with a device code, or show who is signed in (`--status`)."""

    from app.client.signin import sign_in_here

    def signed_in(sign_in: UserSignIn) -> int:
        account = (
            sign_in.who() if args.status else sign_in_here(sign_in, device_code=args.device_code, say=_say)
        )
        if account is None:
            print(f"Not signed in to {args.url}")
            return 1
        print(f"Signed in to {args.url} as {account.username} (tenant {account.tenant_id})")
        return 0

    return _with_user_sign_in(args.url, signed_in)


def logout(args: argparse.Namespace) -> int:
    """Forget the user signed in to the server at `--url`, and their tokens."""

    def signed_out(sign_in: UserSignIn) -> int:
        forgotten = sign_in.logout()
        if forgotten:
            print(f"Signed out of {args.url}: {', '.join(forgotten)}")
        else:
            print(f"No one was signed in to {args.url}")
        return 0

    return _with_user_sign_in(args.url, signed_out)


def _with_user_sign_in(url: str, action: Callable[[UserSignIn], int]) -> int:
    """Run `action` with the user's sign-in to the server at `url`; its exit code, or a one-line
    reason on stderr and the exit code for it when the server cannot be asked or sign-in fails."""
    from app.client.errors import ClientError
    from app.client.tokens import sign_in_for

    try:
        sign_in = sign_in_for(url)
        if sign_in is None:
            print(f"anvil: {url} asks for no sign-in; nothing to do")
            return 0
        return action(sign_in)
    except ClientError as error:
        _say(f"anvil: {error.message}")
        return error.exit_code


def openapi(args: argparse.Namespace) -> int:
    """Print the OpenAPI document: 3.1 as the server publishes it, or 3.0.3 for API Management."""
    from app.main import create_app

    settings = _settings()
    document = create_app(settings).openapi()
    if args.openapi_version == "3.0":
        from app.rest.openapi30 import CLIENT_ID_PLACEHOLDER, TENANT_ID_PLACEHOLDER, entra_scheme, openapi_30

        if settings.auth_mode != "entra":
            _say(
                f"anvil: note: ANVIL_AUTH_MODE is {settings.auth_mode!r}, so the oauth2 sign-in scheme names "
                f"the placeholders {TENANT_ID_PLACEHOLDER} and {CLIENT_ID_PLACEHOLDER}; set "
                "ANVIL_AUTH_MODE=entra with both to fill them in"
            )
        document = openapi_30(document, security=entra_scheme(settings))
    print(json.dumps(document, indent=2))
    return 0


def _url_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--url",
        type=arguments.server_url,
        default=os.environ.get("ANVIL_URL") or DEFAULT_URL,
        help=f"{what} (default: ANVIL_URL, else {DEFAULT_URL})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `anvil` argument parser, with one subcommand per command."""
    parser = argparse.ArgumentParser(prog="anvil", description="Anvil: a sessionless MCP service.")
    parser.add_argument("--version", action="version", version=f"anvil {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("serve", help="run the HTTP server (MCP at /mcp, REST at /api)")
    p.add_argument("--host", help="bind address (default 127.0.0.1, or ANVIL_HOST)")
    p.add_argument("--port", type=int, help="port (default 8000, or ANVIL_PORT)")
    p.set_defaults(run=serve)

    from app.cli.index import add_index_command

    add_index_command(commands, _index)

    p = commands.add_parser("token", help="print a dev access token")
    p.add_argument("--user", required=True, help="user name; the same name always maps to the same user")
    p.add_argument("--tenant", help="tenant id (default: the dev tenant)")
    p.add_argument("--scope", action="append", help="delegated scope (repeatable; default access_as_user)")
    p.add_argument(
        "--ttl",
        type=arguments.ttl,
        default=3600,
        help="lifetime in seconds, 1 second to 30 days (default 3600)",
    )
    p.set_defaults(run=token)

    p = commands.add_parser("ask", help="ask a running server a question (REST POST /api/ask)")
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
    p.add_argument("--instructions", metavar="TEXT", help="instructions, for a new conversation only")
    p.add_argument("--json", action="store_true", help="print the whole answer envelope as JSON")
    p.add_argument(
        "--token",
        help="bearer token (default: ANVIL_TOKEN, else what the server asks for: none, a dev token "
        "for a local dev server, or the user signed in with `anvil login`)",
    )
    p.set_defaults(run=ask)

    p = commands.add_parser(
        "bridge",
        help="serve MCP on stdin/stdout for a host, forwarding to a remote Anvil",
        description="A stdio MCP server for hosts that only start local servers: every request goes "
        "to the Anvil at --url over Streamable HTTP, signed in as the user (see `anvil login`).",
    )
    _url_argument(p, "the server's base URL or its /mcp endpoint")
    p.add_argument(
        "--token",
        help="bearer token (default: ANVIL_TOKEN, else a dev token for a local dev server, "
        "else the user signed in with `anvil login`)",
    )
    p.set_defaults(run=bridge)

    for name, run, summary in (
        ("login", login, "sign in to a server with Microsoft Entra (web browser or device code)"),
        ("logout", logout, "forget the user signed in to a server, and their tokens"),
    ):
        p = commands.add_parser(name, help=summary, description=f"{summary[0].upper()}{summary[1:]}.")
        _url_argument(p, "the server's base URL or its /mcp endpoint")
        if name == "login":
            p.add_argument("--status", action="store_true", help="only show who is signed in")
            p.add_argument(
                "--device-code",
                action="store_true",
                help="sign in with a code entered on another device, even where a browser could open",
            )
        p.set_defaults(run=run)

    p = commands.add_parser("openapi", help="print the OpenAPI document")
    p.add_argument(
        "--openapi-version",
        choices=("3.1", "3.0"),
        default="3.1",
        help="3.1: the document /openapi.json serves (default); 3.0: OpenAPI 3.0.3 for API Management, "
        "with Entra ID sign-in as an oauth2 scheme",
    )
    p.set_defaults(run=openapi)
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
