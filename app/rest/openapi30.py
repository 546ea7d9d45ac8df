"""OpenAPI 3.0.3 for API Management, from the OpenAPI 3.1 document the app serves.

API Management imports OpenAPI 3.1 only in part, and 3.1 schemas that allow `null` are reported
to fail there; 3.0.3 is the version it reads whole. `openapi_30` rewrites a 3.1 document into
3.0.3 without changing what it describes where 3.0 can say the same thing:

- `anyOf`/`oneOf` with a `{"type": "null"}` branch and `type: [..., "null"]` become
  `nullable: true`; a nullable `$ref` becomes `allOf: [{"$ref": ...}]` beside `nullable` (3.0
  ignores anything next to a `$ref`), with the referenced schema's `type`, since 3.0.3 applies
  `nullable` only where `type` is stated; for the same reason, a union of several alternatives
  and null puts `nullable` on the first alternative that states a `type`;
- `const` becomes a one-item `enum`, a schema's `examples` its first `example`, numeric
  `exclusiveMinimum`/`exclusiveMaximum` the boolean form beside `minimum`/`maximum`,
  `contentEncoding: base64` `format: byte` and `contentMediaType` on a string `format: binary`;
- `prefixItems` (tuples) become `items`, boolean schemas `{}` and `{"not": {}}`, and nested
  `$defs` move to `components/schemas`;
- keywords 3.0 has no way to say (`if`/`then`/`else`, `patternProperties`, `unevaluated*`,
  `$id`, ...) are dropped: validation at the gateway is looser, never stricter;
- every operation keeps its `operationId` and `summary`, or gets one.

With an `OAuth2Scheme`, the operations that need sign-in (those with a `security` requirement)
name that scheme and its scopes instead. `entra_scheme(settings)` builds it for Microsoft Entra
ID from the app's settings; when `ANVIL_AUTH_MODE` is not `entra` the tenant and client ids
are the placeholders `ANVIL_ENTRA_TENANT_ID` and `ANVIL_ENTRA_CLIENT_ID` (the settings that
would fill them), for a deployment to replace once its app registration exists.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.settings import Settings

OPENAPI_VERSION = "3.0.3"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
TENANT_ID_PLACEHOLDER = "ANVIL_ENTRA_TENANT_ID"
CLIENT_ID_PLACEHOLDER = "ANVIL_ENTRA_CLIENT_ID"

#: JSON Schema keywords that OpenAPI 3.0's Schema Object lacks and that have no 3.0 equivalent.
DROPPED_KEYWORDS = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$comment",
        "$dynamicRef",
        "$dynamicAnchor",
        "$vocabulary",
        "contentSchema",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedItems",
        "unevaluatedProperties",
        "propertyNames",
        "patternProperties",
        "if",
        "then",
        "else",
        "contains",
        "minContains",
        "maxContains",
    }
)
#: Keywords that only describe a schema: a null branch carrying just these is plain `null`.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "example", "deprecated"})
_LOCAL_DEFS = "#/$defs/"
_COMPONENT_SCHEMAS = "#/components/schemas/"


@dataclass(frozen=True, slots=True)
class OAuth2Scheme:
    """An OAuth 2.0 authorization-code scheme: where clients sign in and which scopes to ask for."""

    authorization_url: str
    token_url: str
    #: scope -> what granting it allows, as a consent screen or a developer portal shows it.
    scopes: Mapping[str, str] = field(default_factory=dict)
    name: str = "entra"
    description: str = "Microsoft Entra ID sign-in (OAuth 2.0 authorization code flow)"

    def component(self) -> dict[str, Any]:
        """The scheme as an entry of `components/securitySchemes`."""
        return {
            "type": "oauth2",
            "description": self.description,
            "flows": {
                "authorizationCode": {
                    "authorizationUrl": self.authorization_url,
                    "tokenUrl": self.token_url,
                    "scopes": dict(self.scopes),
                }
            },
        }


def entra_scheme(settings: Settings) -> OAuth2Scheme:
    """Entra's authorization-code endpoints and Anvil's delegated scopes, from the settings.

    Outside `ANVIL_AUTH_MODE=entra` the tenant and client ids are `TENANT_ID_PLACEHOLDER` and
    `CLIENT_ID_PLACEHOLDER`.
    """
    tenant, client_id = TENANT_ID_PLACEHOLDER, CLIENT_ID_PLACEHOLDER
    if settings.auth_mode == "entra" and settings.entra_tenant_id and settings.entra_client_id:
        # Lower-cased as Entra writes ids into tokens and identifier URIs.
        tenant, client_id = settings.entra_tenant_id.lower(), settings.entra_client_id.lower()
    endpoint = f"{settings.entra_authority_url}/{tenant}/oauth2/v2.0"
    return OAuth2Scheme(
        authorization_url=f"{endpoint}/authorize",
        token_url=f"{endpoint}/token",
        scopes={
            f"api://{client_id}/{scope}": f"Call Anvil as the signed-in user (delegated scope {scope})"
            for scope in settings.entra_required_scopes
        },
    )


def openapi_30(document: Mapping[str, Any], *, security: OAuth2Scheme | None = None) -> dict[str, Any]:
    """The OpenAPI 3.0.3 form of the 3.1 `document` (which is left unchanged).

    With `security`, every operation that has a security requirement requires that scheme and all
    its scopes instead, and schemes no operation names any more are removed.
    """
    result: dict[str, Any] = copy.deepcopy(dict(document))
    result["openapi"] = OPENAPI_VERSION
    for key in ("jsonSchemaDialect", "webhooks"):
        result.pop(key, None)
    _info(result.get("info"))
    components = result.setdefault("components", {})
    schemas: dict[str, Any] = components.setdefault("schemas", {})
    _hoist_defs(result, schemas)
    converter = _SchemaConverter(schemas)
    components.pop("pathItems", None)
    for name in list(schemas):
        schemas[name] = converter.convert(schemas[name])
    for kind in ("parameters", "headers"):
        for name, parameter in components.get(kind, {}).items():
            components[kind][name] = _parameter(parameter, converter)
    for name, response in components.get("responses", {}).items():
        components["responses"][name] = _response(response, converter)
    for name, body in components.get("requestBodies", {}).items():
        components["requestBodies"][name] = _with_content(body, converter)
    paths: dict[str, Any] = result.setdefault("paths", {})
    for path, item in paths.items():
        if not path.startswith("x-"):
            _path_item(item, converter)
    _name_operations(paths)
    if security is not None:
        _require(result, security)
    if not components["schemas"]:
        del components["schemas"]
    if not components:
        del result["components"]
    return result


def _info(info: Any) -> None:
    """Drop what a 3.0 Info Object cannot hold (`summary`, a license given by SPDX id only)."""
    if not isinstance(info, dict):
        return
    info.pop("summary", None)
    licence = info.get("license")
    if isinstance(licence, dict):
        licence.pop("identifier", None)
        if "url" not in licence:
            del info["license"]


def _hoist_defs(node: Any, schemas: dict[str, Any]) -> None:
    """Move every nested `$defs` entry to `schemas` and point `#/$defs/` references there."""
    if isinstance(node, list):
        for item in node:
            _hoist_defs(item, schemas)
        return
    if not isinstance(node, dict):
        return
    definitions = node.pop("$defs", None)
    if isinstance(definitions, dict):
        for name, definition in definitions.items():
            _hoist_defs(definition, schemas)
            if name in schemas and schemas[name] != definition:
                raise ValueError(f"two different schemas are both named {name!r}")
            schemas[name] = definition
    reference = node.get("$ref")
    if isinstance(reference, str) and reference.startswith(_LOCAL_DEFS):
        node["$ref"] = _COMPONENT_SCHEMAS + reference.removeprefix(_LOCAL_DEFS)
    # A copy: hoisting into `components/schemas` adds to the mapping being walked.
    for value in list(node.values()):
        _hoist_defs(value, schemas)


class _SchemaConverter:
    """Rewrites one 3.1 (JSON Schema 2020-12) schema as a 3.0 Schema Object."""

    def __init__(self, schemas: Mapping[str, Any]) -> None:
        # The component schemas as they are before conversion: only their `type` is read.
        self._schemas = dict(schemas)

    def convert(self, schema: Any) -> Any:
        if schema is True:
            return {}
        if schema is False:
            return {"not": {}}
        if not isinstance(schema, dict):
            return schema
        schema = {k: v for k, v in schema.items() if k not in DROPPED_KEYWORDS}
        if schema.get("type") == "null":
            # 3.0 has no `null` type: a schema that only allows null.
            del schema["type"]
            schema.update(nullable=True, enum=[None])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                schema = self._nullable_branches(schema, key)
        self._keywords(schema)
        self._subschemas(schema)
        if isinstance(schema.get("type"), list):
            schema = self._type_list(schema)
        if "$ref" in schema and len(schema) > 1:
            schema = self._wrap_reference(schema)
        return schema

    def _nullable_branches(self, schema: dict[str, Any], key: str) -> dict[str, Any]:
        """`anyOf: [X, {type: null}]` -> X (or `allOf: [X]` for a reference) with `nullable: true`."""
        variants = schema[key]
        if not isinstance(variants, list):
            return schema
        kept = [v for v in variants if not _is_null(v)]
        if len(kept) == len(variants):
            return schema
        rest = {k: v for k, v in schema.items() if k != key}
        if not kept:
            return {**rest, "nullable": True, "enum": [None]}
        if len(kept) > 1:
            return (
                {**rest, key: _null_in_one(kept)} if _typed(kept) else {**rest, key: kept, "nullable": True}
            )
        (only,) = kept
        if isinstance(only, dict) and set(only) == {"$ref"} and "allOf" not in rest:
            # Wrapped into `allOf` (with the target's `type`) once the schema is converted.
            return {**rest, "$ref": only["$ref"], "nullable": True}
        if isinstance(only, dict) and "$ref" not in only and not (set(only) & set(rest)) - _ANNOTATIONS:
            # The outer schema's title, description and default describe the property: they win.
            return {**only, **rest, "nullable": True}
        return {**rest, "allOf": [only], "nullable": True}

    def _keywords(self, schema: dict[str, Any]) -> None:
        """The 3.1 keywords that have a 3.0 spelling, in place."""
        if "const" in schema:
            value = schema.pop("const")
            schema["enum"] = [value]
            if value is None:
                schema["nullable"] = True
        examples = schema.pop("examples", None)
        if isinstance(examples, list) and examples and "example" not in schema:
            schema["example"] = examples[0]
        # sign: +1 for a lower bound, -1 for an upper one.
        for exclusive, inclusive, sign in (
            ("exclusiveMinimum", "minimum", 1),
            ("exclusiveMaximum", "maximum", -1),
        ):
            bound = schema.get(exclusive)
            if isinstance(bound, bool) or not isinstance(bound, int | float):
                continue
            if isinstance(schema.get(inclusive), int | float) and sign * (schema[inclusive] - bound) > 0:
                del schema[exclusive]  # the inclusive bound already excludes `bound`
            else:
                schema[inclusive], schema[exclusive] = bound, True
        encoding = schema.pop("contentEncoding", None)
        media_type = schema.pop("contentMediaType", None)
        if "format" not in schema:
            if encoding == "base64":
                schema["format"] = "byte"
            elif media_type is not None and encoding is None and schema.get("type") == "string":
                schema["format"] = "binary"
        if "prefixItems" in schema:
            prefix = schema.pop("prefixItems")
            rest = schema.get("items")
            variants = [*prefix, *([rest] if isinstance(rest, dict) else [])]
            unique = list({json.dumps(v, sort_keys=True): v for v in variants}.values())
            schema["items"] = unique[0] if len(unique) == 1 else {"anyOf": unique}
        if schema.get("type") == "array" and "items" not in schema:
            schema["items"] = {}  # 3.0 requires `items` for an array

    def _subschemas(self, schema: dict[str, Any]) -> None:
        for key in ("items", "not"):
            if key in schema:
                schema[key] = self.convert(schema[key])
        if isinstance(schema.get("additionalProperties"), dict):
            schema["additionalProperties"] = self.convert(schema["additionalProperties"])
        if isinstance(schema.get("properties"), dict):
            schema["properties"] = {name: self.convert(s) for name, s in schema["properties"].items()}
        for key in ("allOf", "anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                schema[key] = [self.convert(s) for s in schema[key]]

    def _type_list(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`type: [T, "null"]` -> `type: T, nullable: true`; several types -> `anyOf` of each."""
        listed = schema.pop("type")
        types = [t for t in listed if t != "null"]
        nullable = len(types) < len(listed) or bool(schema.pop("nullable", False))
        if len(types) == 1:
            schema["type"] = types[0]
        elif types:
            branches: list[Any] = [{"type": t} for t in types]
            # 3.0.3 applies `nullable` only beside a `type`: on one of the alternatives.
            alternatives = {"anyOf": _null_in_one(branches) if nullable else branches}
            if "anyOf" in schema:
                schema["allOf"] = [*schema.get("allOf", []), alternatives]
            else:
                schema.update(alternatives)
            return schema
        else:
            schema["enum"] = [None]
        return {**schema, "nullable": True} if nullable else schema

    def _wrap_reference(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`{$ref, ...}` -> `{allOf: [{$ref}], ...}`: 3.0 ignores whatever sits beside a `$ref`."""
        reference = schema.pop("$ref")
        wrapped = {"allOf": [{"$ref": reference}], **schema}
        target = self._schemas.get(reference.removeprefix(_COMPONENT_SCHEMAS))
        target_type = target.get("type") if isinstance(target, dict) else None
        # 3.0.3 applies `nullable` only beside a `type`.
        if wrapped.get("nullable") and "type" not in wrapped and isinstance(target_type, str):
            wrapped["type"] = target_type
        return wrapped


def _typed(variants: list[Any]) -> bool:
    """Whether one of `variants` states a single `type`, where 3.0.3 can put `nullable`."""
    return any(isinstance(v, dict) and isinstance(v.get("type"), str) for v in variants)


def _null_in_one(variants: list[Any]) -> list[Any]:
    """`variants` with `nullable: true` on the first that states a type: 3.0.3 applies
    `nullable` only beside a `type`, and null then matches one alternative (as `oneOf` needs)."""
    first = next(i for i, v in enumerate(variants) if isinstance(v, dict) and isinstance(v.get("type"), str))
    return [{**v, "nullable": True} if i == first else v for i, v in enumerate(variants)]


def _is_null(schema: Any) -> bool:
    """Whether `schema` allows `null` alone."""
    return (
        isinstance(schema, dict)
        and schema.get("type") == "null"
        and not (set(schema) - _ANNOTATIONS - {"type"})
    )


def _with_content(holder: Any, converter: _SchemaConverter) -> Any:
    """A request body, response or parameter: the schema of each of its media types converted."""
    if not isinstance(holder, dict):
        return holder
    if "$ref" in holder:
        return {"$ref": holder["$ref"]}  # a 3.0 Reference Object has nothing beside `$ref`
    for media in holder.get("content", {}).values():
        if not isinstance(media, dict):
            continue
        if "schema" in media:
            media["schema"] = converter.convert(media["schema"])
        for encoding in media.get("encoding", {}).values():
            for name, header in encoding.get("headers", {}).items():
                encoding["headers"][name] = _parameter(header, converter)
    return holder


def _parameter(parameter: Any, converter: _SchemaConverter) -> Any:
    parameter = _with_content(parameter, converter)
    if isinstance(parameter, dict) and "schema" in parameter:
        parameter["schema"] = converter.convert(parameter["schema"])
    return parameter


def _response(response: Any, converter: _SchemaConverter) -> Any:
    response = _with_content(response, converter)
    if isinstance(response, dict):
        for name, header in response.get("headers", {}).items():
            response["headers"][name] = _parameter(header, converter)
    return response


def _path_item(item: Any, converter: _SchemaConverter) -> None:
    if not isinstance(item, dict):
        return
    item["parameters"] = [_parameter(p, converter) for p in item.get("parameters", [])]
    if not item["parameters"]:
        del item["parameters"]
    for method in HTTP_METHODS:
        operation = item.get(method)
        if not isinstance(operation, dict):
            continue
        if "parameters" in operation:
            operation["parameters"] = [_parameter(p, converter) for p in operation["parameters"]]
        if "requestBody" in operation:
            operation["requestBody"] = _with_content(operation["requestBody"], converter)
        responses = operation.setdefault("responses", {"default": {"description": "Response"}})
        for status, response in responses.items():
            responses[status] = _response(response, converter)
        for callback in operation.get("callbacks", {}).values():
            for expression_item in callback.values():
                _path_item(expression_item, converter)


def _operations(paths: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(path, method, operation) for every operation, in document order."""
    return [
        (path, method, item[method])
        for path, item in paths.items()
        if isinstance(item, dict)
        for method in HTTP_METHODS
        if isinstance(item.get(method), dict)
    ]


def _name_operations(paths: Mapping[str, Any]) -> None:
    """Give every operation an `operationId` (unique) and a `summary` if it has none."""
    operations = _operations(paths)
    taken = {op["operationId"] for _, _, op in operations if op.get("operationId")}
    for path, method, operation in operations:
        if not operation.get("operationId"):
            words = [w for w in re.split(r"[^A-Za-z0-9]+", path) if w]
            base = method + "".join(w[:1].upper() + w[1:] for w in words)
            candidate, number = base, 2
            while candidate in taken:
                candidate, number = f"{base}{number}", number + 1
            operation["operationId"] = candidate
            taken.add(candidate)
        if not operation.get("summary"):
            description = str(operation.get("description") or "").strip()
            first = re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0].rstrip(".")
            operation["summary"] = first[:120] if first else f"{method.upper()} {path}"


def _require(document: dict[str, Any], scheme: OAuth2Scheme) -> None:
    """Wherever sign-in is required (the document's or an operation's `security`), require
    `scheme` with all its scopes; a requirement that was optional (`{}` among them) stays so."""
    replaced: set[str] = set()
    holders = [document, *(operation for _, _, operation in _operations(document.get("paths", {})))]
    for holder in holders:
        requirements = holder.get("security") or []
        if any(requirements):
            replaced.update(name for requirement in requirements for name in requirement)
            optional: list[dict[str, list[str]]] = [{}] if not all(requirements) else []
            holder["security"] = [{scheme.name: list(scheme.scopes)}, *optional]
    schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes[scheme.name] = scheme.component()
    named = {name for holder in holders for requirement in holder.get("security", []) for name in requirement}
    for name in replaced - named:
        schemes.pop(name, None)
