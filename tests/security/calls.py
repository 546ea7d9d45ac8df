"""What the security tests share: the tenant and app ids, the server's environment, and calls."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx
from support.anvil_server import AnvilServer
from support.entra_issuer import EntraIssuer
from support.entra_keys import LOCAL_CLIENT_ID, LOCAL_TENANT
from support.jsonrpc import mcp_call

TENANT = LOCAL_TENANT
OTHER_TENANT = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
CLIENT_ID = LOCAL_CLIENT_ID
SCOPE = "access_as_user"
PUBLIC_URL = "https://anvil.example.com"
METADATA_URL = f"{PUBLIC_URL}/.well-known/oauth-protected-resource/mcp"
DB_NAME = "conversations.sqlite3"


def entra_env(issuer: EntraIssuer, **extra: str) -> dict[str, str]:
    """`anvil serve` in Entra mode against `issuer`, single tenant, echo engine, SQLite store."""
    return {
        "ANVIL_AUTH_MODE": "entra",
        "ANVIL_ENTRA_AUTHORITY": issuer.authority,
        "ANVIL_ENTRA_TENANT_ID": TENANT,
        "ANVIL_ENTRA_CLIENT_ID": CLIENT_ID,
        "ANVIL_ANSWER_ENGINE": "echo",
        "ANVIL_STORE": "sqlite",
        "ANVIL_PUBLIC_URL": PUBLIC_URL,
        **extra,
    }


def new_id(prefix: str = "conv") -> str:
    """A fresh conversation id (or user object id with prefix "")."""
    return f"{prefix}-{uuid.uuid4().hex}" if prefix else str(uuid.uuid4())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ask_mcp(
    server: AnvilServer, token: str, question: str, conversation_id: str | None = None
) -> httpx.Response:
    arguments: dict[str, Any] = {"question": question}
    if conversation_id is not None:
        arguments["conversationId"] = conversation_id
    return mcp_call(server, "ask", arguments, bearer(token))


def ask_rest(
    server: AnvilServer, token: str, question: str, conversation_id: str | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"question": question}
    if conversation_id is not None:
        body["conversationId"] = conversation_id
    return httpx.post(f"{server.url}/api/ask", json=body, headers=bearer(token), timeout=30)


def tool_result(response: httpx.Response) -> dict[str, Any]:
    """The `result` of a successful JSON-RPC answer."""
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def _connect_read_only(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{(data_dir / DB_NAME).as_uri()}?mode=ro", uri=True)


def stored_rows(data_dir: Path) -> list[tuple[Any, ...]]:
    """Every row of the server's conversation table, read-only, in key order."""
    with contextlib.closing(_connect_read_only(data_dir)) as db:
        return db.execute("SELECT key, version, updated_at FROM conversations ORDER BY key").fetchall()


def rows_for(data_dir: Path, conversation_id: str) -> int:
    """How many stored conversations have this id, whoever owns them."""
    with contextlib.closing(_connect_read_only(data_dir)) as db:
        (count,) = db.execute(
            "SELECT count(*) FROM conversations WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()
    return int(count)
