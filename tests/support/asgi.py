"""Driving Anvil in process: its lifespan run, its state handed to each request as servers do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

BASE_URL = "http://127.0.0.1:8000"


class WithState:
    """ASGI app that puts a copy of the lifespan state in every request's scope (as uvicorn does)."""

    def __init__(self, app: FastAPI, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app({**scope, "state": dict(self.state)}, receive, send)


@asynccontextmanager
async def started(app: FastAPI) -> AsyncIterator[WithState]:
    """Run `app`'s lifespan around the block; yields the app as a server would call it."""
    async with app.router.lifespan_context(app) as state:
        yield WithState(app, dict(state or {}))


@asynccontextmanager
async def client(app: FastAPI, base_url: str = BASE_URL) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for `app`, started, in process."""
    async with started(app) as running:
        transport = httpx.ASGITransport(app=running)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as http:
            yield http


def post_scope(headers: list[tuple[bytes, bytes]], path: str = "/mcp") -> dict[str, Any]:
    """The ASGI scope a server gives a POST to `path` carrying `headers` exactly as given."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 8000),
    }
