"""The OpenAPI 3.1 document: valid, and saying what each route takes and every status it answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.validators import OpenAPIV31SpecValidator

from app.main import create_app
from app.operations.catalog import OPERATIONS
from app.rest.openapi import EVERY_PROBE, EVERY_ROUTE, status_meanings
from app.settings import Settings


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    settings = Settings(
        store="memory", answer_engine="echo", max_body_bytes=4096, data_dir=tmp_path_factory.mktemp("openapi")
    )
    built: dict[str, Any] = create_app(settings).openapi()
    return built


def test_the_document_validates_as_openapi_31(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    validate(document, cls=OpenAPIV31SpecValidator)


def test_every_route_lists_its_own_statuses_and_those_of_every_layer(document: dict[str, Any]) -> None:
    for operation in OPERATIONS:
        route = operation.route
        responses = document["paths"][route.path][route.method.lower()]["responses"]
        expected = {str(route.status_code), *(str(s) for s in (*route.errors, *EVERY_ROUTE))}
        assert set(responses) == expected, route.operation_id
        problem = responses["413"]["content"]["application/problem+json"]["schema"]
        assert problem == {"$ref": "#/components/schemas/Problem"}
        assert "4096 bytes" in responses["413"]["description"]
    for probe in ("/healthz", "/readyz"):
        assert set(document["paths"][probe]["get"]["responses"]) == {"200", *map(str, EVERY_PROBE)}


def test_a_503_may_be_the_servers_own_plain_text(document: dict[str, Any]) -> None:
    ask = document["paths"]["/api/ask"]["post"]["responses"]
    assert set(ask["503"]["content"]) == {"application/problem+json", "text/plain"}
    assert set(ask["400"]["content"]) == {"application/problem+json"}


def test_query_parameters_come_from_the_arguments_model_without_null(document: dict[str, Any]) -> None:
    (cursor,) = [
        p for p in document["paths"]["/api/conversations"]["get"]["parameters"] if p["name"] == "cursor"
    ]
    assert cursor["in"] == "query" and cursor["required"] is False
    assert cursor["schema"]["type"] == "string" and "anyOf" not in cursor["schema"]
    (path_id,) = document["paths"]["/api/conversations/{conversationId}"]["get"]["parameters"][:1]
    assert (path_id["name"], path_id["in"], path_id["required"]) == ("conversationId", "path", True)
    body = document["paths"]["/api/ask"]["post"]["requestBody"]
    assert (
        body["required"] is True and "question" in body["content"]["application/json"]["schema"]["required"]
    )


def test_a_started_or_listed_conversation_links_to_the_routes_that_take_it(document: dict[str, Any]) -> None:
    started = document["paths"]["/api/conversations"]["post"]["responses"]["201"]["links"]
    assert started["getConversation"] == {
        "operationId": "getConversation",
        "parameters": {"conversationId": "$response.body#/conversationId"},
    }
    assert set(started) == {"getConversation", "deleteConversation"}
    assert "links" in document["paths"]["/api/conversations"]["get"]["responses"]["200"]


def test_sign_in_is_required_on_the_api_and_mcp_only(document: dict[str, Any]) -> None:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            needs = path.startswith("/api/") or path == "/mcp"
            assert (operation.get("security") == [{"bearer": []}]) is needs, (path, method)
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_mcp_takes_one_json_rpc_message(document: dict[str, Any]) -> None:
    mcp = document["paths"]["/mcp"]["post"]
    assert mcp["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JsonRpcMessage"
    }
    assert {"200", "202", "406", "415"} <= set(mcp["responses"])
    assert list(mcp["responses"]) == sorted(mcp["responses"], key=int)


def test_every_status_a_route_can_answer_has_a_meaning(tmp_path: Path) -> None:
    meanings = status_meanings(Settings(data_dir=tmp_path))
    statuses = {s for operation in OPERATIONS for s in operation.route.errors} | set(EVERY_ROUTE)
    assert statuses <= set(meanings)
