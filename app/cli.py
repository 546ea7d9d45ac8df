"""The `anvil` command: serve, token, ask, bridge, login, logout, openapi."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from app import __version__

if TYPE_CHECKING:
    from app.client.login import Account, UserSignIn
    from app.settings import Settings

#: Variables the command line reads for itself (`anvil ask`), not server settings: exporting
#: them must not make the server refuse to start as if they were misspelt settings.
CLIENT_VARIABLES = frozenset({"ANVIL_URL", "ANVIL_TOKEN", "ANVIL_TOKEN_CACHE", "ANVIL_SIGN_IN_CLIENT_ID"})
DEFAULT_URL = "http://127.0.0.1:8000"
#: Exit status when standard output was closed before everything was written to it: 128 + SIGPIPE
#: (13), what a shell reports for `cat` or `grep` in the same place (a literal: Windows has no
#: SIGPIPE).
EXIT_CLOSED_PIPE = 141


def _settings(**overrides: Any) -> Settings:
    """Settings from the environment plus command-line overrides; exits with one line if invalid."""
    from pydantic import ValidationError

    from app.settings import Settings, describe_error, unknown_variables

    unknown = [name for name in unknown_variables(os.environ) if name.upper() not in CLIENT_VARIABLES]
    if unknown:
        print(
            f"anvil: invalid configuration: unknown setting {', '.join(unknown)}; "
            "see docs/configuration.md for the names",
            file=sys.stderr,
        )
        raise SystemExit(2)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as error:
        print(f"anvil: invalid configuration: {describe_error(error)}", file=sys.stderr)
        raise SystemExit(2) from None


#: Young-generation threshold for `anvil serve`. A young collection walks every young object
#: still alive, and under load that includes each in-flight request's objects: the default 700
#: collects very often, and 50,000 let them pile up into 15-60 ms pauses every couple of seconds
#: (the p99 tail); 2,000 kept each pause to about a millisecond for the same or less CPU.
GC_THRESHOLDS = (2_000, 20, 100)


def settle_heap() -> None:
    """Keep start-up objects (modules, schemas, the index) out of every future collection.

    They live as long as the process, so scanning them again and again only adds pauses. (No
    collection first: it would cost tens of milliseconds of start-up for a few kilobytes.)
    """
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    gc.enable()


def serve(args: argparse.Namespace) -> int:
    """Run the HTTP server until interrupted."""
    # Start-up creates objects that live as long as the process and almost no garbage;
    # collecting while they pile up scans them again and again (about 100 ms of a cold start).
    # Collection comes back on, tuned, once the app has started (`settle_heap`).
    gc.disable()
    import uvicorn

    settings = _settings(host=args.host, port=args.port)
    from app.telemetry.logs import configure_logging

    configure_logging(settings)
    from app.http.frontdoor import front_door
    from app.main import create_app
    from app.telemetry.setup import TelemetryError

    try:
        api = create_app(settings)
    except TelemetryError as error:
        print(f"anvil: invalid telemetry configuration: {error}", file=sys.stderr)
        return 2

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            settle_heap()

        def handle_exit(self, sig: int, frame: Any) -> None:
            # Readiness fails from the first signal on, while requests in flight finish.
            api.state.draining = True
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        api,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        log_level=settings.log_level,
        # uvicorn's loggers propagate to the root handler `configure_logging` set up (JSON lines).
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        # uvicorn has no deadline or size limit for request heads, nor a deadline for bodies: the
        # front door adds them, and keeps connections that have not sent a whole request out of
        # `limit_concurrency`.
        http=front_door(
            header_timeout=settings.header_timeout_seconds,
            max_header_bytes=settings.max_header_bytes,
            body_timeout=settings.body_timeout_seconds,
            draining=lambda: bool(getattr(api.state, "draining", False)),
        ),
        timeout_keep_alive=settings.keep_alive_seconds,
        limit_concurrency=settings.max_concurrent_requests,
        timeout_graceful_shutdown=settings.drain_seconds,
    )
    server = Server(config)
    # uvicorn raises the stop signal again once it has drained, for the handler that was there
    # before it: a no-op here, so that a requested stop is a clean exit (status 0).
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda *_: None)
    server.run()
    # uvicorn leaves `started` False when the lifespan failed (bad corpus, unreadable key, ...).
    return 0 if server.started else 3


def token(args: argparse.Namespace) -> int:
    """Print a dev access token for `--user`, valid for servers sharing this data dir.

    Only the token goes to stdout (scripts capture it); stderr names the key it was signed with,
    and warns when that key was only just created, since no running server knows it yet.
    """
    settings = _settings()
    if settings.auth_mode != "dev":
        print(
            f"anvil: `anvil token` mints dev tokens, but ANVIL_AUTH_MODE is {settings.auth_mode!r}",
            file=sys.stderr,
        )
        return 2
    from app.auth.dev import DEV_SCOPE, KEY_FILE_NAME, user_oid
    from app.client.tokens import dev_issuer

    data_dir = settings.data_dir.resolve()
    created = not (data_dir / KEY_FILE_NAME).exists()
    try:
        user_oid(args.user)  # a bad user name must not leave a new key behind
        issuer = dev_issuer(data_dir)
        minted = issuer.mint(args.user, tenant=args.tenant, scopes=args.scope or [DEV_SCOPE], ttl=args.ttl)
    except ValueError as error:
        print(f"anvil: {error}", file=sys.stderr)
        return 2
    print(f"anvil: signing with the dev key in {data_dir} ({KEY_FILE_NAME})", file=sys.stderr)
    if created:
        print(
            f"anvil: warning: {data_dir} held no dev key, so a new one was created; a server using another "
            "data folder will refuse this token (run both with the same ANVIL_DATA_DIR)",
            file=sys.stderr,
        )
    print(minted)
    return 0


def ask(args: argparse.Namespace) -> int:
    """Ask the server a question over REST and print the answer with its sources."""
    from app.client.rest import EXIT_SIGN_IN_REFUSED, ClientError
    from app.client.rest import ask as ask_server
    from app.client.tokens import SignInProblem, choose

    try:
        choice = choose(args.url, args.token, _settings)
        bearer = choice.source.get(False) if choice.source is not None else None
    except SignInProblem as problem:
        print(f"anvil: {problem}", file=sys.stderr)
        return problem.exit_code
    except Exception as error:  # the token source's own one-line reason (MSAL, the dev key)
        print(f"anvil: {error}", file=sys.stderr)
        return EXIT_SIGN_IN_REFUSED
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
        if error.exit_code == EXIT_SIGN_IN_REFUSED and choice.hint:
            message = f"{message} ({choice.hint})"
        print(f"anvil: {message}", file=sys.stderr)
        return error.exit_code
    if args.json:
        print(json.dumps(envelope, indent=2, ensure_ascii=False))
        return 0
    print(render_answer(envelope))
    note = envelope.get("note")
    if args.conversation is not None and isinstance(note, str) and note:
        print(f"anvil: note: {note}", file=sys.stderr)
    return 0


def bridge(args: argparse.Namespace) -> int:
    """Serve MCP on stdin/stdout for a host, forwarding every request to the server at `--url`."""
    import anyio

    from app.client.bridge import BridgeError, mcp_endpoint, serve_stdio
    from app.client.tokens import SignInProblem, choose

    url = mcp_endpoint(args.url)
    try:
        choice = choose(args.url, args.token, _settings)
        if choice.sign_in is not None:
            _signed_in(choice.sign_in)
    except SignInProblem as problem:
        print(f"anvil bridge: {problem}", file=sys.stderr)
        return problem.exit_code
    try:
        anyio.run(serve_stdio, url, choice.source, choice.hint)
    except BridgeError as error:
        print(f"anvil bridge: {error.message}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


def _signed_in(sign_in: UserSignIn) -> None:
    """Make sure `sign_in` holds a working token, signing the user in when it does not (in a web
    browser where one can be opened, else with a device code shown on stderr); `SignInProblem`
    when that fails."""
    from app.client.login import SignInError, SignInRequired
    from app.client.tokens import SignInProblem

    try:
        sign_in.token()
        return
    except SignInRequired:
        pass
    except SignInError as error:
        raise SignInProblem(str(error)) from None
    try:
        account = _sign_in(sign_in, device_code=False, prefix="anvil: ")
    except SignInError as error:
        raise SignInProblem(str(error)) from None
    print(f"anvil: signed in as {account.username}", file=sys.stderr)


def _sign_in(sign_in: UserSignIn, *, device_code: bool, prefix: str = "") -> Account:
    """Sign the user in: in a web browser where one can be opened (unless `device_code`), else with
    the device code flow, its instructions on stderr."""
    from app.client.login import browser_available

    if not device_code and browser_available():
        print(f"{prefix}signing in in your web browser...", file=sys.stderr, flush=True)
        return sign_in.login_in_browser()
    return sign_in.login(prompt=lambda message: print(f"{prefix}{message}", file=sys.stderr, flush=True))


def login(args: argparse.Namespace) -> int:
    """Sign in to the server at `--url` with a device code, or show who is signed in (`--status`)."""

    def signed_in(sign_in: UserSignIn) -> int:
        account = sign_in.who() if args.status else _sign_in(sign_in, device_code=args.device_code)
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
    from app.client.login import SignInError
    from app.client.rest import EXIT_SIGN_IN_REFUSED
    from app.client.tokens import SignInProblem, sign_in_for

    try:
        sign_in = sign_in_for(url)
        if sign_in is None:
            print(f"anvil: {url} asks for no sign-in; nothing to do")
            return 0
        return action(sign_in)
    except SignInProblem as problem:
        print(f"anvil: {problem}", file=sys.stderr)
        return problem.exit_code
    except SignInError as error:
        print(f"anvil: {error}", file=sys.stderr)
        return EXIT_SIGN_IN_REFUSED


def render_answer(envelope: dict[str, Any]) -> str:
    """The answer, its sources (`- file (heading)`) and the conversation turn, as plain text."""
    parts = [str(envelope.get("answer", "")).rstrip()]
    sources = [s for s in envelope.get("sources") or [] if isinstance(s, dict)]
    if sources:
        lines = [
            f"- {s.get('source')} ({s.get('heading')})" if s.get("heading") else f"- {s.get('source')}"
            for s in sources
        ]
        parts.append("Sources:\n" + "\n".join(lines))
    if envelope.get("conversationId"):
        parts.append(f"(conversation {envelope['conversationId']}, turn {envelope.get('turn')})")
    return "\n\n".join(parts)


def openapi(args: argparse.Namespace) -> int:
    """Print the OpenAPI document: 3.1 as the server publishes it, or 3.0.3 for API Management."""
    from app.main import create_app

    settings = _settings()
    document = create_app(settings).openapi()
    if args.openapi_version == "3.0":
        from app.rest.openapi30 import CLIENT_ID_PLACEHOLDER, TENANT_ID_PLACEHOLDER, entra_scheme, openapi_30

        if settings.auth_mode != "entra":
            print(
                f"anvil: note: ANVIL_AUTH_MODE is {settings.auth_mode!r}, so the oauth2 sign-in scheme names "
                f"the placeholders {TENANT_ID_PLACEHOLDER} and {CLIENT_ID_PLACEHOLDER}; set "
                "ANVIL_AUTH_MODE=entra with both to fill them in",
                file=sys.stderr,
            )
        document = openapi_30(document, security=entra_scheme(settings))
    print(json.dumps(document, indent=2))
    return 0


def _conversation_id(value: str) -> str:
    """argparse type: a valid conversationId, else a usage error naming the rule."""
    from app.domain.conversation import CONVERSATION_ID_RULE, is_valid_conversation_id

    if not is_valid_conversation_id(value):
        raise argparse.ArgumentTypeError(CONVERSATION_ID_RULE)
    return value


def _server_url(value: str) -> str:
    """argparse type: an http(s) URL with a host, without a trailing slash."""
    try:
        parts = urlsplit(value)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        valid = False
    if not valid:
        raise argparse.ArgumentTypeError(f"{value!r} is not an http(s) URL like {DEFAULT_URL}")
    return value.rstrip("/")


def _ttl(value: str) -> int:
    """argparse type: a token lifetime in whole seconds, from 1 second to 30 days."""
    from app.auth.dev import MAX_TTL_SECONDS

    try:
        seconds = int(value)
    except ValueError:
        seconds = 0
    if not 1 <= seconds <= MAX_TTL_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a lifetime from 1 second to 30 days: give whole seconds, "
            f"from 1 to {MAX_TTL_SECONDS}"
        )
    return seconds


def _question(value: str) -> str:
    """argparse type: a question with some text in it."""
    if not value.strip():
        raise argparse.ArgumentTypeError("the question is empty")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The `anvil` argument parser, with one subcommand per command."""
    parser = argparse.ArgumentParser(prog="anvil", description="Anvil: a sessionless MCP service.")
    parser.add_argument("--version", action="version", version=f"anvil {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("serve", help="run the HTTP server (MCP at /mcp, REST at /api)")
    p.add_argument("--host", help="bind address (default 127.0.0.1, or ANVIL_HOST)")
    p.add_argument("--port", type=int, help="port (default 8000, or ANVIL_PORT)")
    p.set_defaults(run=serve)

    p = commands.add_parser("token", help="print a dev access token")
    p.add_argument("--user", required=True, help="user name; the same name always maps to the same user")
    p.add_argument("--tenant", help="tenant id (default: the dev tenant)")
    p.add_argument("--scope", action="append", help="delegated scope (repeatable; default access_as_user)")
    p.add_argument(
        "--ttl", type=_ttl, default=3600, help="lifetime in seconds, 1 second to 30 days (default 3600)"
    )
    p.set_defaults(run=token)

    p = commands.add_parser("ask", help="ask a running server a question (REST POST /api/ask)")
    p.add_argument("question", type=_question, metavar="QUESTION", help="the question, in plain words")
    p.add_argument(
        "--url",
        type=_server_url,
        default=os.environ.get("ANVIL_URL") or DEFAULT_URL,
        help=f"the server's base URL (default: ANVIL_URL, else {DEFAULT_URL})",
    )
    p.add_argument(
        "--conversation",
        type=_conversation_id,
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
    p.add_argument(
        "--url",
        type=_server_url,
        default=os.environ.get("ANVIL_URL") or DEFAULT_URL,
        help=f"the server's base URL or its /mcp endpoint (default: ANVIL_URL, else {DEFAULT_URL})",
    )
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
        p.add_argument(
            "--url",
            type=_server_url,
            default=os.environ.get("ANVIL_URL") or DEFAULT_URL,
            help=f"the server's base URL or its /mcp endpoint (default: ANVIL_URL, else {DEFAULT_URL})",
        )
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
