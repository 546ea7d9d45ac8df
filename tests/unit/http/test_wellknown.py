"""The RFC 9728 protected-resource metadata: served where a 401 points, and 404 with sign-in off."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.asgi import BASE_URL, client

from app.http.wellknown import WELL_KNOWN
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio


def settings(tmp_path: Path, auth_mode: str) -> Settings:
    return Settings(auth_mode=auth_mode, store="memory", answer_engine="echo", data_dir=tmp_path)


async def test_both_paths_serve_the_metadata_a_401_names(tmp_path: Path) -> None:
    async with client(create_app(settings(tmp_path, "dev"))) as http:
        refused = await http.post("/api/ask", json={"question": "q"})
        assert refused.status_code == 401
        assert f'resource_metadata="{BASE_URL}{WELL_KNOWN}/mcp"' in refused.headers["www-authenticate"]
        documents = [await http.get(path) for path in (WELL_KNOWN, WELL_KNOWN + "/mcp")]
        head = await http.head(WELL_KNOWN + "/mcp")
    for response in documents:
        assert response.status_code == 200
        assert response.headers["cache-control"] == "public, max-age=3600"
        assert response.json() == documents[0].json()
    metadata = documents[0].json()
    assert metadata["resource"].startswith(BASE_URL) and metadata["authorization_servers"]
    assert head.status_code == 200 and head.content == b""


async def test_with_sign_in_off_there_is_nothing_to_describe(tmp_path: Path) -> None:
    async with client(create_app(settings(tmp_path, "none"))) as http:
        for path in (WELL_KNOWN, WELL_KNOWN + "/mcp"):
            response = await http.get(path)
            assert response.status_code == 404
            assert response.headers["content-type"] == "application/problem+json"
            assert "ANVIL_AUTH_MODE=none" in response.json()["detail"]


def test_the_metadata_is_left_out_of_the_openapi_document(tmp_path: Path) -> None:
    paths = create_app(settings(tmp_path, "dev")).openapi()["paths"]
    assert not [path for path in paths if path.startswith("/.well-known/")]
