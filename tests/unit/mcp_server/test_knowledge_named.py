"""The tools, the server's instructions, the OpenAPI document and `/readyz` say what Anvil answers
from: an agent holding several MCP servers can tell when to call this one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.asgi import client
from support.jsonrpc import LEGACY, envelope

from app.main import create_app
from app.settings import Settings
from app.settings.engines import BUNDLED_NAME

pytestmark = pytest.mark.anyio


async def described(settings: Settings) -> dict[str, Any]:
    """What a host reads: the tools' descriptions, the instructions, the OpenAPI summary, /readyz."""
    async with client(create_app(settings)) as http:
        listed = envelope("tools/list", version=LEGACY)
        tools = (await http.post("/mcp", json=listed.body, headers=listed.headers)).json()["result"]["tools"]
        started = envelope(
            "initialize",
            {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            version=None,
        )
        initialized = (await http.post("/mcp", json=started.body, headers=started.headers)).json()["result"]
        return {
            "tools": {tool["name"]: tool["description"] for tool in tools},
            "instructions": initialized["instructions"],
            "openapi": (await http.get("/openapi.json")).json()["info"]["description"],
            "readyz": (await http.get("/readyz")).json()["index"],
        }


def settings(tmp_path: Path, **values: Any) -> Settings:
    return Settings(auth_mode="none", store="memory", embeddings="none", data_dir=tmp_path / "data", **values)


async def test_the_bundled_docs_are_named_as_anvils_documentation(tmp_path: Path) -> None:
    said = await described(settings(tmp_path))
    assert said["tools"]["ask"].startswith(f"Answer a question from {BUNDLED_NAME} (how to run, configure")
    assert "Rank passages of Anvil's documentation" in said["tools"]["search"]
    assert "one document of Anvil's documentation" in said["tools"]["fetch"]
    assert f"from {BUNDLED_NAME} (how to run" in said["instructions"]
    assert BUNDLED_NAME in said["openapi"]
    assert said["readyz"]["name"] == BUNDLED_NAME


async def test_the_settings_name_the_knowledge_and_say_what_it_covers(tmp_path: Path) -> None:
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "leave.md").write_text("# Leave\n\nAsk your lead for leave.\n", encoding="utf-8")
    named = settings(
        tmp_path,
        corpus_dir=folder,
        knowledge_name="the Contoso handbook",
        knowledge_description="leave, pay and travel at Contoso",
    )
    said = await described(named)
    phrase = "the Contoso handbook (leave, pay and travel at Contoso)"
    assert said["tools"]["ask"].startswith(f"Answer a question from {phrase}")
    assert phrase in said["instructions"] and phrase in said["openapi"]
    assert (said["readyz"]["name"], said["readyz"]["description"]) == (
        "the Contoso handbook",
        "leave, pay and travel at Contoso",
    )
    assert not any("Anvil's documentation" in text for text in said["tools"].values())


async def test_a_corpus_folder_nobody_named_goes_by_its_folders_name(tmp_path: Path) -> None:
    folder = tmp_path / "field-guide"
    folder.mkdir()
    (folder / "birds.md").write_text("# Birds\n\nRobins sing at dawn.\n", encoding="utf-8")
    said = await described(settings(tmp_path, corpus_dir=folder))
    assert said["readyz"]["name"] == "field-guide"
    assert "Rank passages of field-guide" in said["tools"]["search"]
    assert "from field-guide with the `ask` tool" in said["instructions"]
