"""The `anvil` command: serve, token, openapi."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.settings import Settings


def _settings(**overrides: Any) -> Settings:
    """Settings from the environment plus command-line overrides; exits with one line if invalid."""
    from pydantic import ValidationError

    from app.settings import Settings, describe_error, unknown_variables

    unknown = unknown_variables(os.environ)
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
    from app.observability import configure_logging

    configure_logging(settings)
    from app.main import create_app
    from app.telemetry import TelemetryError

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
    """Print a dev access token for `--user`, valid for servers sharing this data dir."""
    settings = _settings()
    if settings.auth_mode != "dev":
        print(
            f"anvil: `anvil token` mints dev tokens, but ANVIL_AUTH_MODE is {settings.auth_mode!r}",
            file=sys.stderr,
        )
        return 2
    from app.adapters.auth.dev import DEV_SCOPE, DevIssuer

    issuer = DevIssuer.load_or_create(settings.data_dir)
    try:
        minted = issuer.mint(args.user, tenant=args.tenant, scopes=args.scope or [DEV_SCOPE], ttl=args.ttl)
    except ValueError as error:
        print(f"anvil: {error}", file=sys.stderr)
        return 2
    print(minted)
    return 0


def openapi(_: argparse.Namespace) -> int:
    """Print the OpenAPI document."""
    from app.main import create_app

    anvil = create_app(_settings())
    print(json.dumps(anvil.openapi(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="anvil", description="Anvil: a sessionless MCP service.")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("serve", help="run the HTTP server (MCP at /mcp, REST at /api)")
    p.add_argument("--host", help="bind address (default 127.0.0.1, or ANVIL_HOST)")
    p.add_argument("--port", type=int, help="port (default 8000, or ANVIL_PORT)")
    p.set_defaults(run=serve)

    p = commands.add_parser("token", help="print a dev access token")
    p.add_argument("--user", required=True, help="user name; the same name always maps to the same user")
    p.add_argument("--tenant", help="tenant id (default: the dev tenant)")
    p.add_argument("--scope", action="append", help="delegated scope (repeatable; default access_as_user)")
    p.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    p.set_defaults(run=token)

    p = commands.add_parser("openapi", help="print the OpenAPI document")
    p.set_defaults(run=openapi)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
