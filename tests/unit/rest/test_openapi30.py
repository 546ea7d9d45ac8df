"""OpenAPI 3.1 -> 3.0.3 for API Management: what Anvil's document holds converts, checked by a
validator; anything else is refused by name, so a model change cannot slip past unconverted."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.validators import OpenAPIV30SpecValidator

from app.main import create_app
from app.rest.openapi30 import (
    CLIENT_ID_PLACEHOLDER,
    TENANT_ID_PLACEHOLDER,
    OAuth2Scheme,
    Unconvertible,
    entra_scheme,
    openapi_30,
)
from app.settings import Settings

TENANT = "7f0c6a2e-1b4d-4c8e-9a3f-5d2e8b1c0a94"
CLIENT = "3c9e1f7a-6b2d-4e5f-8a1c-0d9b7e2f4c61"
SCHEME = OAuth2Scheme(
    authorization_url="https://login.example.com/t/oauth2/v2.0/authorize",
    token_url="https://login.example.com/t/oauth2/v2.0/token",
    scopes={"api://c/access_as_user": "Call the API as the signed-in user"},
)
OK = {"200": {"description": "ok"}}


def document(schemas: dict[str, Any] | None = None, **paths: Any) -> dict[str, Any]:
    """A minimal OpenAPI 3.1 document with these component schemas and paths."""
    doc: dict[str, Any] = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": paths}
    if schemas is not None:
        doc["components"] = {"schemas": schemas}
    return doc


def converted(schemas: dict[str, Any]) -> dict[str, Any]:
    """The component schemas after conversion; the whole document must validate as 3.0.3."""
    result = openapi_30(document(schemas))
    validate(result, cls=OpenAPIV30SpecValidator)
    assert result["openapi"] == "3.0.3"
    schemas_30: dict[str, Any] = result["components"]["schemas"]
    return schemas_30


@pytest.mark.parametrize("auth", ["dev", "entra"])
def test_anvils_own_document_converts_and_validates_as_303(auth: str, tmp_path: Path) -> None:
    common: dict[str, Any] = {"store": "memory", "answer_engine": "echo", "data_dir": tmp_path}
    settings = (
        Settings(auth_mode="entra", entra_tenant_id=TENANT, entra_client_id=CLIENT, **common)
        if auth == "entra"
        else Settings(auth_mode="dev", **common)
    )
    source = create_app(settings).openapi()
    result = openapi_30(source, security=entra_scheme(settings))
    validate(result, cls=OpenAPIV30SpecValidator)
    assert '"type": "null"' in json.dumps(source) and '"type": "null"' not in json.dumps(result)
    assert set(result["paths"]) == set(source["paths"])


def test_a_null_alternative_becomes_the_schema_marked_nullable() -> None:
    schemas = converted(
        {
            "Thing": {
                "type": "object",
                "properties": {
                    "name": {
                        "anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "null"}],
                        "title": "Name",
                        "description": "the name",
                    },
                    "params": {"anyOf": [{"type": "object"}, {"type": "null"}]},
                    "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
                },
                "required": ["name"],
                "additionalProperties": False,
            }
        }
    )
    properties = schemas["Thing"]["properties"]
    assert properties["name"] == {
        "type": "string",
        "pattern": "^[a-z]+$",
        "title": "Name",
        "description": "the name",
        "nullable": True,
    }
    assert properties["params"] == {"type": "object", "nullable": True}
    assert properties["count"] == {"type": "integer", "minimum": 1, "maximum": 10, "default": 5}
    assert schemas["Thing"]["additionalProperties"] is False


def test_a_nullable_reference_is_wrapped_in_allof_with_the_type_of_its_target() -> None:
    schemas = converted(
        {
            "Usage": {"type": "object", "properties": {"tokens": {"type": "integer"}}},
            "Out": {
                "type": "object",
                "properties": {
                    "usage": {
                        "anyOf": [{"$ref": "#/components/schemas/Usage"}, {"type": "null"}],
                        "description": "spent",
                    },
                    "all": {"type": "array", "items": {"$ref": "#/components/schemas/Usage"}},
                },
            },
        }
    )
    assert schemas["Out"]["properties"]["usage"] == {
        "allOf": [{"$ref": "#/components/schemas/Usage"}],
        "description": "spent",
        "nullable": True,
        "type": "object",
    }
    assert schemas["Out"]["properties"]["all"]["items"] == {"$ref": "#/components/schemas/Usage"}


def test_several_alternatives_and_null_put_nullable_on_the_first_typed_one() -> None:
    schemas = converted(
        {"Id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}], "description": "id"}}
    )
    assert schemas["Id"] == {
        "description": "id",
        "anyOf": [{"type": "string", "nullable": True}, {"type": "integer"}],
    }


def test_what_30_says_the_same_way_is_kept_as_it_is() -> None:
    schemas = {
        "Message": {
            "type": "object",
            "properties": {
                "jsonrpc": {"type": "string", "enum": ["2.0"]},
                "id": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "data": {},
            },
            "required": ["jsonrpc"],
            "not": {"required": ["id"]},
        },
        "Either": {"anyOf": [{"$ref": "#/components/schemas/Message"}, {"type": "string"}]},
    }
    assert converted(copy.deepcopy(schemas)) == schemas


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"const": "done"}, "'const'"),
        ({"type": "string", "examples": ["v"]}, "'examples'"),
        ({"type": "array", "prefixItems": [{"type": "string"}]}, "'prefixItems'"),
        ({"type": ["string", "null"]}, "'type': ['string', 'null']"),
        ({"type": "null"}, "'type': 'null'"),
        ({"$defs": {"A": {"type": "string"}}, "type": "object"}, "'$defs'"),
        ({"if": {"type": "string"}, "then": {"minLength": 1}}, "'if', 'then'"),
        ({"type": "number", "exclusiveMinimum": 0}, "'exclusiveMinimum'"),
        ({"type": "string", "contentEncoding": "base64"}, "'contentEncoding'"),
        ({"type": "object", "patternProperties": {"^x": {}}}, "'patternProperties'"),
        ({"$ref": "#/components/schemas/Other", "description": "d"}, "a '$ref' with keywords beside it"),
        ({"type": "array"}, "an array without 'items'"),
        ({"anyOf": [{"type": "null"}]}, "allows null alone"),
        ({"anyOf": [{"$ref": "#/components/schemas/Untyped"}, {"type": "null"}]}, "with no 'type'"),
        ({"anyOf": [{"type": "string", "title": "a"}, {"type": "null"}], "title": "b"}, "both stating"),
        (True, "the schema True"),
    ],
)
def test_a_schema_construct_it_does_not_convert_is_refused_by_name(schema: Any, named: str) -> None:
    doc = document({"Other": {"type": "string"}, "Untyped": {}, "Thing": {"properties": {"x": schema}}})
    with pytest.raises(Unconvertible) as refused:
        openapi_30(doc)
    assert named in str(refused.value)
    assert "components/schemas/Thing/properties/x" in str(refused.value)


def operation(**fields: Any) -> dict[str, Any]:
    return {"operationId": "op", "summary": "s", "responses": copy.deepcopy(OK), **fields}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d.update(webhooks={"ping": {"post": operation()}}), "'webhooks'"),
        (
            lambda d: d.update(jsonSchemaDialect="https://spec.openapis.org/oas/3.1/dialect/base"),
            "'jsonSchemaDialect'",
        ),
        (lambda d: d["info"].update(summary="short"), "info"),
        (lambda d: d["info"].update(license={"name": "MIT", "identifier": "MIT"}), "'license'"),
        (lambda d: d.update(components={"pathItems": {}}), "'pathItems'"),
        (lambda d: d["paths"]["/a"]["get"].update(callbacks={"done": {}}), "GET /a"),
        (lambda d: d["paths"]["/a"].update(parameters=[]), "paths /a"),
        (lambda d: d["paths"]["/a"]["get"]["responses"]["200"].update(headers={}), "'headers'"),
        (
            lambda d: d["paths"]["/a"]["get"].update(
                parameters=[{"name": "q", "in": "query", "content": {"application/json": {}}}]
            ),
            "'content'",
        ),
        (
            lambda d: d["paths"]["/a"]["get"]["responses"]["200"].update(
                content={"application/json": {"schema": {}, "examples": {}}}
            ),
            "'examples'",
        ),
        (
            lambda d: d["paths"]["/a"]["get"].update(
                parameters=[{"name": "q", "in": "query", "schema": {"type": ["integer", "null"]}}]
            ),
            "GET /a parameters/0/schema",
        ),
    ],
)
def test_a_document_construct_it_does_not_convert_is_refused_by_name(change: Any, named: str) -> None:
    doc = document(None, **{"/a": {"get": operation()}})
    change(doc)
    with pytest.raises(Unconvertible, match=r"app\.rest\.openapi30 converts") as refused:
        openapi_30(doc)
    assert named in str(refused.value)


def test_parameters_bodies_and_responses_have_their_schemas_converted() -> None:
    nullable = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    post = operation(
        parameters=[{"name": "q", "in": "query", "required": False, "schema": {"type": "integer"}}],
        requestBody={"required": True, "content": {"application/json": {"schema": nullable}}},
        responses={
            "200": {"description": "ok", "content": {"application/json": {"schema": nullable}}},
            "503": {"description": "busy", "content": {"application/json": {}, "text/plain": {}}},
        },
    )
    result = openapi_30(document(None, **{"/a": {"post": post}}))
    validate(result, cls=OpenAPIV30SpecValidator)
    converted_post = result["paths"]["/a"]["post"]
    expected = {"type": "string", "nullable": True}
    assert converted_post["requestBody"]["content"]["application/json"]["schema"] == expected
    assert converted_post["responses"]["200"]["content"]["application/json"]["schema"] == expected
    assert converted_post["parameters"][0]["schema"] == {"type": "integer"}


def test_operations_that_need_sign_in_require_the_oauth2_scheme() -> None:
    doc = document(
        None,
        **{
            "/api/ask": {"post": operation(operationId="ask", security=[{"bearer": []}])},
            "/healthz": {"get": operation(operationId="healthz")},
        },
    )
    doc["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
    result = openapi_30(doc, security=SCHEME)
    validate(result, cls=OpenAPIV30SpecValidator)
    assert result["paths"]["/api/ask"]["post"]["security"] == [{"entra": ["api://c/access_as_user"]}]
    assert "security" not in result["paths"]["/healthz"]["get"]
    # The bearer scheme is named nowhere any more.
    assert result["components"]["securitySchemes"] == {"entra": SCHEME.component()}
    assert SCHEME.component()["flows"]["authorizationCode"] == {
        "authorizationUrl": SCHEME.authorization_url,
        "tokenUrl": SCHEME.token_url,
        "scopes": dict(SCHEME.scopes),
    }


def test_an_optional_sign_in_is_refused_rather_than_made_mandatory() -> None:
    doc = document(None, **{"/maybe": {"get": operation(security=[{"bearer": []}, {}])}})
    with pytest.raises(Unconvertible, match="GET /maybe security"):
        openapi_30(doc, security=SCHEME)


def test_the_input_document_is_left_unchanged() -> None:
    doc = document(
        {"A": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        **{"/a": {"get": operation(security=[{"bearer": []}])}},
    )
    before = copy.deepcopy(doc)
    openapi_30(doc, security=SCHEME)
    assert doc == before


def test_entra_scheme_from_the_settings(tmp_path: Path) -> None:
    settings = Settings(
        auth_mode="entra",
        entra_tenant_id=TENANT.upper(),
        entra_client_id=CLIENT.upper(),
        entra_required_scopes=["access_as_user", "read"],
        data_dir=tmp_path,
    )
    scheme = entra_scheme(settings)
    assert scheme.authorization_url == f"https://login.microsoftonline.com/{TENANT}/oauth2/v2.0/authorize"
    assert scheme.token_url == f"https://login.microsoftonline.com/{TENANT}/oauth2/v2.0/token"
    assert list(scheme.scopes) == [f"api://{CLIENT}/access_as_user", f"api://{CLIENT}/read"]


def test_entra_scheme_for_a_multi_tenant_app_in_a_sovereign_cloud(tmp_path: Path) -> None:
    settings = Settings(
        auth_mode="entra",
        entra_tenant_id="organizations",
        entra_allowed_tenants=[TENANT],
        entra_client_id=CLIENT,
        entra_authority="https://login.microsoftonline.us/",
        data_dir=tmp_path,
    )
    scheme = entra_scheme(settings)
    assert scheme.authorization_url == "https://login.microsoftonline.us/organizations/oauth2/v2.0/authorize"


def test_entra_scheme_without_entra_sign_in_names_placeholders(tmp_path: Path) -> None:
    # Ids set for another mode are not trusted: Settings only checks them for entra.
    settings = Settings(auth_mode="dev", entra_tenant_id=TENANT, entra_client_id=CLIENT, data_dir=tmp_path)
    scheme = entra_scheme(settings)
    assert scheme.authorization_url == (
        f"https://login.microsoftonline.com/{TENANT_ID_PLACEHOLDER}/oauth2/v2.0/authorize"
    )
    assert list(scheme.scopes) == [f"api://{CLIENT_ID_PLACEHOLDER}/access_as_user"]
    assert TENANT not in json.dumps(scheme.component())
