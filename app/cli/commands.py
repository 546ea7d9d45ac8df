"""What each `anvil` command does once its arguments are read (`app.cli.main` reads them):
serve, token, ask, bridge, login, logout, openapi; `index` is `app.cli.index`'s. Each imports what
it needs when it runs, so that reading the arguments stays light."""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.client.signin import UserSignIn
    from app.settings import Settings

#: Variables the command line reads for itself (`anvil ask`), not server settings: exporting
#: them must not make the server refuse to start as if they were misspelt settings.
CLIENT_VARIABLES = frozenset({"ANVIL_URL", "ANVIL_TOKEN", "ANVIL_TOKEN_CACHE", "ANVIL_SIGN_IN_CLIENT_ID"})


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


def index(args: argparse.Namespace) -> int:
    """Build a knowledge index (`app.cli.index`)."""
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
    turn = envelope.get("turn")
    if args.conversation is not None and isinstance(turn, int):
        # Conversations are the signed-in user's: the same id is another conversation for another.
        whose = f" of {choice.who}" if choice.who else ""
        switch = f"; to ask as another user, {choice.switch}" if choice.switch else ""
        _say(f"anvil: turn {turn} of conversation {args.conversation}{whose}{switch}")
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
