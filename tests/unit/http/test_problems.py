"""Every error the HTTP surface writes is a problem document, whatever raised it."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from support.asgi import client

from app.errors import AnvilError, AuthError, Conflict, InvalidInput, Unavailable, retry_after_header
from app.http.problems import PROBLEM_TYPE_BASE, error_response, problem_document
from app.main import create_app
from app.settings import Settings

pytestmark = pytest.mark.anyio


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    anvil = create_app(Settings(auth_mode="none", store="memory", answer_engine="echo", data_dir=tmp_path))

    async def broken() -> None:
        raise RuntimeError("internal detail: /secret/path and a stack")

    async def busy() -> None:
        raise Unavailable("The conversation store is busy; retry in 3 s.", retry_after=2.2)

    anvil.add_api_route("/broken", broken, methods=["GET"])
    anvil.add_api_route("/busy", busy, methods=["GET"])
    return anvil


@pytest.fixture
async def http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with client(app) as running:
        yield running


def assert_problem(response: httpx.Response, status: int) -> dict[str, object]:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    document: dict[str, object] = response.json()
    assert set(document) == {"type", "title", "status", "detail"} and document["status"] == status
    return document


async def test_an_unknown_path_is_a_404_problem(http: httpx.AsyncClient) -> None:
    for path in ("/nope", "/api/nope", "/mcp/extra"):
        document = assert_problem(await http.get(path), 404)
        assert "/openapi.json" in str(document["detail"])


async def test_a_wrong_method_is_a_405_problem_with_allow(http: httpx.AsyncClient) -> None:
    response = await http.put("/api/ask", json={})
    assert_problem(response, 405)
    assert response.headers["allow"] == "POST"
    several = await http.patch("/api/conversations")
    assert_problem(several, 405)
    assert several.headers["allow"] == "DELETE, GET, HEAD, POST"
    mcp = await http.get("/mcp")
    assert_problem(mcp, 405)
    assert mcp.headers["allow"] == "POST"


async def test_an_unexpected_error_is_a_500_naming_a_correlation_id_and_nothing_internal(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="app.http.problems"):
        response = await http.get("/broken")
    document = assert_problem(response, 500)
    correlation = response.headers["x-correlation-id"]
    assert correlation in str(document["detail"])
    assert "secret" not in response.text and "RuntimeError" not in response.text
    (record,) = [r for r in caplog.records if r.name == "app.http.problems"]
    assert correlation in record.getMessage() and record.exc_info is not None


async def test_unavailable_is_a_503_with_retry_after_in_whole_seconds(http: httpx.AsyncClient) -> None:
    response = await http.get("/busy")
    assert assert_problem(response, 503)["type"] == "https://anvil.dev/problems/unavailable"
    assert response.headers["retry-after"] == "3"


@pytest.mark.parametrize(
    ("seconds", "header"), [(None, "1"), (0.2, "1"), (1.0, "1"), (2.01, "3"), (30, "30")]
)
def test_retry_after_is_whole_seconds_and_at_least_one(seconds: float | None, header: str) -> None:
    assert retry_after_header(seconds) == header


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 408, 409, 413, 421, 429, 431, 500, 502, 503])
def test_the_title_is_the_standard_reason_phrase_of_the_status(status: int) -> None:
    document = problem_document(status, "What to change.")
    assert document == {
        "type": f"{PROBLEM_TYPE_BASE}{status}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": "What to change.",
    }


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidInput("Pass a question."), 400, "invalid-input"),
        (Conflict("In use."), 409, "conflict"),
        (AuthError.invalid("The token has expired."), 401, "invalid-token"),
        (AnvilError("Failed."), 500, "error"),
    ],
)
def test_an_anvil_error_is_rendered_with_its_kind_status_and_message(
    error: AnvilError, status: int, kind: str
) -> None:
    response = error_response(error, headers={"X-Extra": "1"})
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["x-extra"] == "1"
    assert json.loads(bytes(response.body)) == {
        "type": PROBLEM_TYPE_BASE + kind,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": error.message,
    }
