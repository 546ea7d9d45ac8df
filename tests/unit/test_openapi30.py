"""OpenAPI 3.1 -> 3.0.3 for API Management: each rule on a small document, checked by a validator."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.validators import OpenAPIV30SpecValidator

from app.rest.openapi30 import (
    CLIENT_ID_PLACEHOLDER,
    TENANT_ID_PLACEHOLDER,
    OAuth2Scheme,
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


def document(schemas: dict[str, Any] | None = None, **paths: Any) -> dict[str, Any]:
    """A minimal OpenAPI 3.1 document with these component schemas and paths."""
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": paths or {},
    }
    if schemas is not None:
        doc["components"] = {"schemas": schemas}
    return doc


def converted(schemas: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The component schemas after conversion; the whole document must validate as 3.0.3."""
    result = openapi_30(document(schemas), **kwargs)
    validate(result, cls=OpenAPIV30SpecValidator)
    assert result["openapi"] == "3.0.3"
    schemas_30: dict[str, Any] = result["components"]["schemas"]
    return schemas_30


def walk(node: Any) -> list[dict[str, Any]]:
    """Every mapping inside `node`, `node` included."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(walk(value))
    return found


# --- nullable -------------------------------------------------------------------------------------


def test_anyof_with_null_becomes_the_schema_marked_nullable() -> None:
    schemas = converted(
        {
            "M": {
                "type": "object",
                "properties": {
                    "id": {
                        "anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "null"}],
                        "title": "Id",
                        "description": "outer",
                        "default": None,
                    }
                },
            }
        }
    )
    assert schemas["M"]["properties"]["id"] == {
        "type": "string",
        "pattern": "^[a-z]+$",
        "title": "Id",
        "description": "outer",
        "default": None,
        "nullable": True,
    }


def test_the_outer_description_wins_over_the_branch() -> None:
    schemas = converted(
        {
            "M": {
                "anyOf": [{"type": "string", "description": "inner"}, {"type": "null"}],
                "description": "outer",
            }
        }
    )
    assert schemas["M"] == {"type": "string", "description": "outer", "nullable": True}


def test_a_nullable_reference_is_wrapped_in_allof_with_its_type() -> None:
    schemas = converted(
        {
            "Usage": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "Out": {
                "type": "object",
                "properties": {
                    "usage": {
                        "anyOf": [{"$ref": "#/components/schemas/Usage"}, {"type": "null"}],
                        "description": "d",
                    }
                },
            },
        }
    )
    assert schemas["Out"]["properties"]["usage"] == {
        "allOf": [{"$ref": "#/components/schemas/Usage"}],
        "description": "d",
        "nullable": True,
        "type": "object",
    }


def test_nullable_references_deep_inside_arrays_and_maps() -> None:
    ref = {"$ref": "#/components/schemas/Item"}
    schemas = converted(
        {
            "Item": {"type": "string", "enum": ["a", "b"]},
            "Deep": {
                "type": "object",
                "properties": {
                    "list": {"type": "array", "items": {"anyOf": [ref, {"type": "null"}]}},
                    "map": {"type": "object", "additionalProperties": {"oneOf": [{"type": "null"}, ref]}},
                    "nested": {
                        "type": "object",
                        "properties": {"inner": {"type": ["integer", "null"], "minimum": 0}},
                    },
                },
            },
        }
    )
    deep = schemas["Deep"]["properties"]
    wrapped = {"allOf": [ref], "nullable": True, "type": "string"}
    assert deep["list"]["items"] == wrapped
    assert deep["map"]["additionalProperties"] == wrapped
    assert deep["nested"]["properties"]["inner"] == {"type": "integer", "minimum": 0, "nullable": True}


def test_type_lists() -> None:
    schemas = converted(
        {
            "One": {"type": ["string", "null"], "maxLength": 3},
            "Two": {"type": ["string", "integer"]},
            "TwoOrNull": {"type": ["string", "integer", "null"]},
        }
    )
    assert schemas["One"] == {"type": "string", "maxLength": 3, "nullable": True}
    assert schemas["Two"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    # 3.0.3 applies `nullable` only beside a `type`: it goes on one alternative.
    assert schemas["TwoOrNull"] == {"anyOf": [{"type": "string", "nullable": True}, {"type": "integer"}]}


def test_several_branches_besides_null_stay_a_union() -> None:
    schemas = converted(
        {
            "U": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
            "R": {"oneOf": [{"$ref": "#/components/schemas/U"}, {"type": "object"}, {"type": "null"}]},
            "Untyped": {"anyOf": [{"$ref": "#/components/schemas/U"}, {"minLength": 1}, {"type": "null"}]},
        }
    )
    # `nullable` only counts beside a `type` (3.0.3): on the first alternative that states one,
    # so that null matches exactly one, as `oneOf` needs; without one, beside the union.
    assert schemas["U"] == {"anyOf": [{"type": "string", "nullable": True}, {"type": "integer"}]}
    assert schemas["R"] == {
        "oneOf": [{"$ref": "#/components/schemas/U"}, {"type": "object", "nullable": True}]
    }
    assert schemas["Untyped"]["nullable"] is True


def test_no_null_type_is_left_anywhere() -> None:
    schemas = converted(
        {
            "Only": {"type": "null"},
            "Branches": {"anyOf": [{"type": "null"}, {"type": "null", "title": "nothing"}]},
            "Const": {"const": None},
        }
    )
    assert not [n for n in walk(schemas) if n.get("type") == "null" or isinstance(n.get("type"), list)]
    for name in ("Only", "Branches", "Const"):
        assert schemas[name]["nullable"] is True and schemas[name]["enum"] == [None], name


# --- keywords --------------------------------------------------------------------------------------


def test_const_examples_and_exclusive_bounds() -> None:
    schemas = converted(
        {
            "C": {"type": "string", "const": "fixed"},
            "E": {"type": "integer", "examples": [7, 8]},
            "Both": {"type": "integer", "examples": [7], "example": 1},
            "Lo": {"type": "number", "exclusiveMinimum": 0},
            "Hi": {"type": "number", "exclusiveMaximum": 10, "maximum": 20},
            "Tighter": {"type": "number", "exclusiveMinimum": 0, "minimum": 5},
        }
    )
    assert schemas["C"] == {"type": "string", "enum": ["fixed"]}
    assert schemas["E"] == {"type": "integer", "example": 7}
    assert schemas["Both"] == {"type": "integer", "example": 1}
    assert schemas["Lo"] == {"type": "number", "minimum": 0, "exclusiveMinimum": True}
    assert schemas["Hi"] == {"type": "number", "maximum": 10, "exclusiveMaximum": True}
    # minimum 5 already excludes 0: the exclusive bound adds nothing.
    assert schemas["Tighter"] == {"type": "number", "minimum": 5}


def test_content_keywords_become_formats() -> None:
    schemas = converted(
        {
            "File": {"type": "string", "contentMediaType": "application/octet-stream"},
            "Encoded": {"type": "string", "contentEncoding": "base64", "contentMediaType": "image/png"},
            "Kept": {"type": "string", "format": "binary", "contentMediaType": "image/png"},
        }
    )
    assert schemas["File"] == {"type": "string", "format": "binary"}
    assert schemas["Encoded"] == {"type": "string", "format": "byte"}
    assert schemas["Kept"] == {"type": "string", "format": "binary"}


def test_keywords_without_a_30_form_are_dropped() -> None:
    schemas = converted(
        {
            "M": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$id": "urn:m",
                "type": "object",
                "patternProperties": {"^x": {"type": "string"}},
                "propertyNames": {"maxLength": 3},
                "unevaluatedProperties": False,
                "if": {"required": ["a"]},
                "then": {"required": ["b"]},
                "dependentRequired": {"a": ["b"]},
            },
            "Arr": {"type": "array", "contains": {"type": "string"}, "minContains": 1},
        }
    )
    assert schemas["M"] == {"type": "object"}
    assert schemas["Arr"] == {"type": "array", "items": {}}


def test_tuples_and_boolean_schemas() -> None:
    schemas = converted(
        {
            "Pair": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "minItems": 2,
            },
            "Same": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}]},
            "Open": {"type": "object", "properties": {"anything": True, "nothing": False}},
        }
    )
    assert schemas["Pair"] == {
        "type": "array",
        "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "minItems": 2,
    }
    assert schemas["Same"] == {"type": "array", "items": {"type": "string"}}
    assert schemas["Open"]["properties"] == {"anything": {}, "nothing": {"not": {}}}


def test_a_reference_with_siblings_is_wrapped() -> None:
    schemas = converted(
        {
            "A": {"type": "object"},
            "B": {
                "type": "object",
                "properties": {"a": {"$ref": "#/components/schemas/A", "description": "x"}},
            },
        }
    )
    assert schemas["B"]["properties"]["a"] == {
        "allOf": [{"$ref": "#/components/schemas/A"}],
        "description": "x",
    }
    assert not [n for n in walk(schemas) if "$ref" in n and len(n) > 1]


def test_nested_defs_move_to_components_and_their_references_follow() -> None:
    body = {
        "type": "object",
        "properties": {"tag": {"anyOf": [{"$ref": "#/$defs/Tag"}, {"type": "null"}]}},
        "$defs": {"Tag": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    post = {
        "requestBody": {"content": {"application/json": {"schema": body}}},
        "responses": {"200": {"description": "ok"}},
    }
    result = openapi_30(document(None, **{"/things": {"post": post}}))
    validate(result, cls=OpenAPIV30SpecValidator)
    assert result["components"]["schemas"]["Tag"]["properties"] == {"name": {"type": "string"}}
    schema = result["paths"]["/things"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "$defs" not in schema
    assert schema["properties"]["tag"] == {
        "allOf": [{"$ref": "#/components/schemas/Tag"}],
        "nullable": True,
        "type": "object",
    }


def test_two_different_schemas_of_one_name_are_refused() -> None:
    body = {"$defs": {"A": {"type": "string"}}, "type": "object"}
    post = {
        "requestBody": {"content": {"application/json": {"schema": body}}},
        "responses": {"200": {"description": "ok"}},
    }
    with pytest.raises(ValueError, match="'A'"):
        openapi_30(document({"A": {"type": "integer"}}, **{"/x": {"post": post}}))


def test_schemas_in_parameters_responses_and_headers() -> None:
    nullable_int = {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "null"}]}
    get = {
        "parameters": [{"name": "n", "in": "query", "schema": nullable_int}],
        "responses": {
            "200": {
                "description": "ok",
                "headers": {"X-Left": {"schema": {"type": ["integer", "null"]}}},
                "content": {"application/json": {"schema": {"const": "done"}}},
            }
        },
    }
    doc = document(None, **{"/p": {"get": get}})
    doc["components"] = {
        "parameters": {"Shared": {"name": "s", "in": "query", "schema": {"type": ["string", "null"]}}},
        "headers": {"H": {"schema": {"examples": ["v"], "type": "string"}}},
    }
    result = openapi_30(doc)
    validate(result, cls=OpenAPIV30SpecValidator)
    operation = result["paths"]["/p"]["get"]
    assert operation["parameters"][0]["schema"] == {
        "type": "integer",
        "minimum": 0,
        "exclusiveMinimum": True,
        "nullable": True,
    }
    response = operation["responses"]["200"]
    assert response["headers"]["X-Left"]["schema"] == {"type": "integer", "nullable": True}
    assert response["content"]["application/json"]["schema"] == {"enum": ["done"]}
    assert result["components"]["parameters"]["Shared"]["schema"] == {"type": "string", "nullable": True}
    assert result["components"]["headers"]["H"]["schema"] == {"type": "string", "example": "v"}


def test_31_only_document_fields_are_dropped() -> None:
    doc = document({"A": {"type": "string"}})
    doc["jsonSchemaDialect"] = "https://spec.openapis.org/oas/3.1/dialect/base"
    doc["webhooks"] = {"ping": {"post": {"responses": {"200": {"description": "ok"}}}}}
    doc["info"]["summary"] = "short"
    doc["info"]["license"] = {"name": "MIT", "identifier": "MIT"}
    result = openapi_30(doc)
    validate(result, cls=OpenAPIV30SpecValidator)
    assert {"jsonSchemaDialect", "webhooks"}.isdisjoint(result)
    assert result["info"] == {"title": "t", "version": "1"}


# --- operations and sign-in -----------------------------------------------------------------------


def test_every_operation_gets_a_unique_operation_id_and_a_summary() -> None:
    ok = {"200": {"description": "ok"}}
    doc = document(
        None,
        **{
            "/items/{itemId}": {
                "parameters": [
                    {"name": "itemId", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "get": {"operationId": "getItem", "summary": "Read one", "responses": ok},
                "delete": {"description": "Delete the item. It is gone for good.", "responses": ok},
                "put": {"responses": ok},
            },
            "/items/{item_id}": {
                "parameters": [
                    {"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "put": {"responses": ok},
            },
        },
    )
    result = openapi_30(doc)
    validate(result, cls=OpenAPIV30SpecValidator)
    first, second = result["paths"]["/items/{itemId}"], result["paths"]["/items/{item_id}"]["put"]
    assert first["get"]["operationId"] == "getItem" and first["get"]["summary"] == "Read one"
    assert first["delete"]["operationId"] == "deleteItemsItemId"
    assert first["delete"]["summary"] == "Delete the item"
    assert first["put"]["operationId"] == "putItemsItemId"
    assert first["put"]["summary"] == "PUT /items/{itemId}"
    # Another path that reads the same in camelCase.
    assert second["operationId"] == "putItemsItemId2"
    ids = [
        op["operationId"]
        for item in result["paths"].values()
        for key, op in item.items()
        if key != "parameters"
    ]
    assert len(ids) == len(set(ids)) == 4


def test_operations_that_need_sign_in_require_the_oauth2_scheme() -> None:
    ok = {"200": {"description": "ok"}}
    doc = document(
        None,
        **{
            "/api/ask": {
                "post": {"operationId": "ask", "summary": "s", "security": [{"bearer": []}], "responses": ok}
            },
            "/maybe": {
                "get": {
                    "operationId": "maybe",
                    "summary": "s",
                    "security": [{"bearer": []}, {}],
                    "responses": ok,
                }
            },
            "/healthz": {"get": {"operationId": "healthz", "summary": "s", "responses": ok}},
        },
    )
    doc["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
    result = openapi_30(doc, security=SCHEME)
    validate(result, cls=OpenAPIV30SpecValidator)
    paths = result["paths"]
    scopes = ["api://c/access_as_user"]
    assert paths["/api/ask"]["post"]["security"] == [{"entra": scopes}]
    assert paths["/maybe"]["get"]["security"] == [{"entra": scopes}, {}]
    assert "security" not in paths["/healthz"]["get"]
    # The bearer scheme is named nowhere any more.
    assert result["components"]["securitySchemes"] == {
        "entra": {
            "type": "oauth2",
            "description": SCHEME.description,
            "flows": {
                "authorizationCode": {
                    "authorizationUrl": SCHEME.authorization_url,
                    "tokenUrl": SCHEME.token_url,
                    "scopes": dict(SCHEME.scopes),
                }
            },
        }
    }


def test_the_input_document_is_left_unchanged() -> None:
    doc = document(
        {"A": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "B": {"$defs": {"C": {"const": 1}}}},
        **{"/a": {"get": {"security": [{"bearer": []}], "responses": {"200": {"description": "ok"}}}}},
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
