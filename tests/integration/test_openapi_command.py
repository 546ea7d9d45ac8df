"""`anvil openapi` as a deployment runs it: 3.1 by default, 3.0.3 for API Management's import."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.validators import OpenAPIV30SpecValidator, OpenAPIV31SpecValidator
from support.anvil_server import anvil_command

from app.rest.openapi30 import CLIENT_ID_PLACEHOLDER, TENANT_ID_PLACEHOLDER

TENANT = "0b5e7c3a-9d41-4f26-8e1a-6c2d9f0b3e75"
CLIENT = "e4a19c72-3f5b-4d08-a6e1-2b7c8d9f0a36"
ID_PATTERN = "^[A-Za-z0-9._-]{1,64}$"
SIGN_IN_PATHS = ("/api/", "/mcp")
#: The fields of an OpenAPI 3.0.3 Schema Object: a 3.0 document's schemas hold no other.
SCHEMA_30 = frozenset(
    {
        *("$ref", "title", "description", "default", "example", "deprecated", "type", "format"),
        *("nullable", "enum", "pattern", "minLength", "maxLength", "multipleOf", "required"),
        *("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems"),
        *("uniqueItems", "minProperties", "maxProperties", "properties", "additionalProperties"),
        *("items", "allOf", "anyOf", "oneOf", "not", "discriminator", "readOnly", "writeOnly"),
        *("xml", "externalDocs"),
    }
)


def openapi(*args: str, cwd: Path, **env: str) -> tuple[dict[str, Any], str]:
    """The document `anvil openapi ARGS` prints, and its stderr (only the given ANVIL_ variables set)."""
    child_env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ANVIL_")}
    child_env.update({"ANVIL_DATA_DIR": str(cwd), **env})
    ran = subprocess.run(
        [*anvil_command(), "openapi", *args],
        cwd=cwd,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    document: dict[str, Any] = json.loads(ran.stdout)
    return document, ran.stderr


@pytest.fixture(scope="module")
def placeholders(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """The 3.0 document of a dev-mode configuration (placeholders for the Entra ids), and stderr."""
    return openapi("--openapi-version", "3.0", cwd=tmp_path_factory.mktemp("openapi30"))


def mappings(node: Any) -> list[dict[str, Any]]:
    """Every JSON object inside `node`, `node` included."""
    if isinstance(node, dict):
        return [node, *(m for value in node.values() for m in mappings(value))]
    if isinstance(node, list):
        return [m for value in node for m in mappings(value)]
    return []


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(path, method): op for path, item in document["paths"].items() for method, op in item.items()}


def resolve(document: dict[str, Any], reference: str) -> Any:
    assert reference.startswith("#/"), reference
    node: Any = document
    for part in reference[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def test_the_30_document_validates_as_openapi_303(placeholders: tuple[dict[str, Any], str]) -> None:
    document, _ = placeholders
    assert document["openapi"] == "3.0.3"
    validate(document, cls=OpenAPIV30SpecValidator)


def subschemas(schema: Any) -> list[dict[str, Any]]:
    """`schema` and every schema nested in it (not property names or other JSON inside)."""
    if not isinstance(schema, dict):
        return []
    nested = [schema.get(key) for key in ("items", "not", "additionalProperties")]
    nested += list(schema.get("properties", {}).values())
    nested += [s for key in ("allOf", "anyOf", "oneOf") for s in schema.get(key, [])]
    return [schema, *(found for child in nested for found in subschemas(child))]


def test_no_31_construct_is_left(placeholders: tuple[dict[str, Any], str]) -> None:
    document, _ = placeholders
    assert '"type": "null"' not in json.dumps(document)
    roots = list(document["components"]["schemas"].values())
    roots += [node["schema"] for node in mappings(document["paths"]) if "schema" in node]
    schemas = [found for root in roots for found in subschemas(root)]
    assert len(schemas) > 100
    for schema in schemas:
        assert not isinstance(schema.get("type"), list), schema
        assert set(schema) <= SCHEMA_30, schema
        assert (
            not isinstance(schema.get("exclusiveMinimum"), int | float) or schema["exclusiveMinimum"] is True
        )
    # 3.0 ignores anything beside a `$ref`; every reference still points at something.
    for node in mappings(document):
        if "$ref" in node:
            assert set(node) == {"$ref"}, node
            assert isinstance(resolve(document, node["$ref"]), dict), node["$ref"]


def test_every_operation_has_an_operation_id_and_a_summary(placeholders: tuple[dict[str, Any], str]) -> None:
    document, _ = placeholders
    found = operations(document)
    assert {("/api/ask", "post"), ("/mcp", "post"), ("/healthz", "get")} <= set(found)
    ids = [op.get("operationId") for op in found.values()]
    assert all(ids) and len(set(ids)) == len(ids), ids
    assert all(op.get("summary") for op in found.values())


def test_conversation_ids_keep_their_pattern(placeholders: tuple[dict[str, Any], str]) -> None:
    document, _ = placeholders
    path = document["paths"]["/api/conversations/{conversationId}"]
    for method in ("get", "delete"):
        (parameter,) = [p for p in path[method]["parameters"] if p["name"] == "conversationId"]
        assert parameter["in"] == "path" and parameter["schema"]["pattern"] == ID_PATTERN
    body = document["paths"]["/api/ask"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    conversation_id = body["properties"]["conversationId"]
    assert conversation_id["pattern"] == ID_PATTERN
    assert conversation_id["type"] == "string" and conversation_id["nullable"] is True


def test_nullable_results_say_so_the_30_way(placeholders: tuple[dict[str, Any], str]) -> None:
    document, _ = placeholders
    ask = document["components"]["schemas"]["AskOutput"]["properties"]
    assert ask["conversationId"] == {**ask["conversationId"], "type": "string", "nullable": True}
    usage = ask["usage"]
    assert usage["nullable"] is True and usage["type"] == "object"
    (reference,) = usage["allOf"]
    assert resolve(document, reference["$ref"])["type"] == "object"


def test_sign_in_is_an_entra_oauth2_scheme_with_placeholders(
    placeholders: tuple[dict[str, Any], str],
) -> None:
    document, stderr = placeholders
    schemes = document["components"]["securitySchemes"]
    assert list(schemes) == ["entra"]
    flow = schemes["entra"]["flows"]["authorizationCode"]
    base = f"https://login.microsoftonline.com/{TENANT_ID_PLACEHOLDER}/oauth2/v2.0"
    assert (flow["authorizationUrl"], flow["tokenUrl"]) == (f"{base}/authorize", f"{base}/token")
    scope = f"api://{CLIENT_ID_PLACEHOLDER}/access_as_user"
    assert list(flow["scopes"]) == [scope]
    for (path, _), operation in operations(document).items():
        expected = [{"entra": [scope]}] if path.startswith(SIGN_IN_PATHS) else None
        assert operation.get("security") == expected, path
    # Said on stderr, so a script sees it while stdout stays the document.
    assert TENANT_ID_PLACEHOLDER in stderr and CLIENT_ID_PLACEHOLDER in stderr


def test_with_entra_sign_in_the_scheme_names_the_tenant_and_the_api(tmp_path: Path) -> None:
    document, stderr = openapi(
        "--openapi-version",
        "3.0",
        cwd=tmp_path,
        ANVIL_AUTH_MODE="entra",
        ANVIL_ENTRA_TENANT_ID=TENANT,
        ANVIL_ENTRA_CLIENT_ID=CLIENT,
    )
    validate(document, cls=OpenAPIV30SpecValidator)
    flow = document["components"]["securitySchemes"]["entra"]["flows"]["authorizationCode"]
    assert flow["authorizationUrl"] == f"https://login.microsoftonline.com/{TENANT}/oauth2/v2.0/authorize"
    assert flow["tokenUrl"] == f"https://login.microsoftonline.com/{TENANT}/oauth2/v2.0/token"
    assert list(flow["scopes"]) == [f"api://{CLIENT}/access_as_user"]
    assert document["paths"]["/mcp"]["post"]["security"] == [{"entra": [f"api://{CLIENT}/access_as_user"]}]
    assert stderr == ""


def test_the_default_is_the_31_document_and_both_describe_the_same_api(
    tmp_path: Path, placeholders: tuple[dict[str, Any], str]
) -> None:
    document, stderr = openapi(cwd=tmp_path)
    assert document["openapi"].startswith("3.1")
    validate(document, cls=OpenAPIV31SpecValidator)
    assert '"type": "null"' in json.dumps(document)  # what the 3.0 form exists for
    assert stderr == ""
    explicit, _ = openapi("--openapi-version", "3.1", cwd=tmp_path)
    assert explicit == document
    converted, _ = placeholders
    ids_31 = {key: op["operationId"] for key, op in operations(document).items()}
    ids_30 = {key: op["operationId"] for key, op in operations(converted).items()}
    assert ids_30 == ids_31
    assert set(converted["components"]["schemas"]) == set(document["components"]["schemas"])
