"""OpenAPI 3.0.3 for API Management, from the OpenAPI 3.1 document the app serves.

API Management imports OpenAPI 3.1 only in part, and 3.1 schemas that allow `null` are reported
to fail there; 3.0.3 is the version it reads whole. `openapi_30` rewrites what Anvil's document
holds, and nothing more:

- a null alternative, `anyOf: [X, {"type": "null"}]`, becomes `nullable: true`: merged into X
  when X is written out; beside `allOf: [X]` and the referenced schema's `type` when X is a
  `$ref` (3.0 ignores anything beside a `$ref`, and applies `nullable` only where `type` is
  stated); on the first typed alternative when several remain;
- with an `OAuth2Scheme`, the operations that need sign-in (those with a `security`
  requirement) name that scheme and its scopes instead of bearer. `entra_scheme(settings)`
  builds it for Microsoft Entra ID; when `ANVIL_AUTH_MODE` is not `entra` the tenant and client
  ids are the placeholders `ANVIL_ENTRA_TENANT_ID` and `ANVIL_ENTRA_CLIENT_ID` (the settings
  that would fill them), for a deployment to replace once its app registration exists.

Everything else is kept where 3.0 spells it as 3.1 does. Anything else (a 3.1 construct a model
change brings in: `const`, `prefixItems`, a list of types, `$defs`, webhooks, ...) raises
`Unconvertible` naming where it is, so the change fails in the tests rather than reaching the
gateway described differently.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.settings.auth import AuthSettings

OPENAPI_VERSION = "3.0.3"
TENANT_ID_PLACEHOLDER = "ANVIL_ENTRA_TENANT_ID"
CLIENT_ID_PLACEHOLDER = "ANVIL_ENTRA_CLIENT_ID"

#: Schema keywords that mean the same in OpenAPI 3.0's Schema Object and in JSON Schema 2020-12.
SAME_KEYWORDS = frozenset(
    {
        "title",
        "description",
        "default",
        "enum",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "required",
        "minProperties",
        "maxProperties",
        "readOnly",
        "writeOnly",
        "deprecated",
    }
)
#: Keywords that hold schemas, converted in turn (`type` and `$ref` are checked on their own).
NESTING_KEYWORDS = frozenset(
    {"properties", "items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"}
)
#: What the document and its objects may hold besides schemas, spelt the same in 3.0.
DOCUMENT_FIELDS = frozenset({"openapi", "info", "servers", "paths", "components", "tags"})
INFO_FIELDS = frozenset({"title", "description", "version", "termsOfService", "contact"})
COMPONENT_KINDS = frozenset({"schemas", "securitySchemes"})
METHODS = frozenset({"get", "put", "post", "delete", "patch", "head", "options", "trace"})
OPERATION_FIELDS = frozenset(
    {"tags", "summary", "description", "operationId", "parameters", "requestBody", "responses", "security"}
)
PARAMETER_FIELDS = frozenset({"name", "in", "required", "description", "schema", "deprecated"})
BODY_FIELDS = frozenset({"description", "required", "content"})
RESPONSE_FIELDS = frozenset({"description", "content", "links"})
MEDIA_FIELDS = frozenset({"schema"})
_NULL = {"type": "null"}
_COMPONENT_SCHEMAS = "#/components/schemas/"


class Unconvertible(ValueError):
    """The 3.1 document holds something the 3.0 rendering does not convert."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(
            f"OpenAPI 3.0 rendering: {what} at {where} is not one of the constructs "
            "app.rest.openapi30 converts; convert it there (and test it) or keep the models to "
            "what it converts"
        )


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


def entra_scheme(settings: AuthSettings) -> OAuth2Scheme:
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
    _only(result, DOCUMENT_FIELDS, "the document")
    _only(result.get("info", {}), INFO_FIELDS, "info")
    result["openapi"] = OPENAPI_VERSION
    components: dict[str, Any] = result.get("components", {})
    _only(components, COMPONENT_KINDS, "components")
    schemas: dict[str, Any] = components.get("schemas", {})
    converter = _SchemaConverter(schemas)
    for name, schema in schemas.items():
        schemas[name] = converter.convert(schema, f"components/schemas/{name}")
    for path, item in result.get("paths", {}).items():
        _only(item, METHODS, f"paths {path}")
        for method, operation in item.items():
            _operation(operation, converter, f"{method.upper()} {path}")
    if security is not None:
        _require(result, security)
    return result


def _only(holder: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(holder) - known)
    if unknown:
        raise Unconvertible(where, ", ".join(map(repr, unknown)))


class _SchemaConverter:
    """Rewrites one 3.1 (JSON Schema 2020-12) schema as a 3.0 Schema Object."""

    def __init__(self, schemas: Mapping[str, Any]) -> None:
        # The component schemas before conversion: only their `type` is read.
        self._schemas = dict(schemas)

    def convert(self, schema: Any, where: str) -> dict[str, Any]:
        if not isinstance(schema, dict):
            raise Unconvertible(where, f"the schema {schema!r}")
        for key in ("anyOf", "oneOf"):
            if _NULL in schema.get(key, []):
                return self._nullable(schema, key, where)
        _only(schema, SAME_KEYWORDS | NESTING_KEYWORDS | {"type", "$ref"}, where)
        kind = schema.get("type", "")
        if not isinstance(kind, str) or kind == "null":
            raise Unconvertible(where, f"'type': {kind!r}")
        if "$ref" in schema and len(schema) > 1:
            raise Unconvertible(where, "a '$ref' with keywords beside it")
        if kind == "array" and "items" not in schema:
            raise Unconvertible(where, "an array without 'items'")
        return {key: self._nested(key, value, f"{where}/{key}") for key, value in schema.items()}

    def _nested(self, key: str, value: Any, where: str) -> Any:
        if key in ("items", "not"):
            return self.convert(value, where)
        if key == "additionalProperties":
            return value if isinstance(value, bool) else self.convert(value, where)
        if key == "properties":
            return {name: self.convert(s, f"{where}/{name}") for name, s in value.items()}
        if key in ("allOf", "anyOf", "oneOf"):
            return [self.convert(s, f"{where}/{n}") for n, s in enumerate(value)]
        return value

    def _nullable(self, schema: dict[str, Any], key: str, where: str) -> dict[str, Any]:
        """`anyOf: [X, {type: null}]` -> X (or `allOf: [X]` for a reference) with `nullable: true`."""
        kept = [v for v in schema[key] if v != _NULL]
        rest = {k: v for k, v in schema.items() if k != key}
        if len(kept) > 1:
            union = self.convert({**rest, key: kept}, where)
            typed = [n for n, v in enumerate(union[key]) if isinstance(v.get("type"), str)]
            if not typed:
                raise Unconvertible(where, f"a nullable '{key}' without a typed alternative")
            union[key][typed[0]] = {**union[key][typed[0]], "nullable": True}
            return union
        if len(kept) != 1 or not isinstance(kept[0], dict):
            raise Unconvertible(where, f"a '{key}' that allows null alone")
        (only,) = kept
        if set(only) == {"$ref"}:
            target = self._schemas.get(str(only["$ref"]).removeprefix(_COMPONENT_SCHEMAS))
            kind = target.get("type") if isinstance(target, dict) else None
            if not isinstance(kind, str):
                raise Unconvertible(where, f"a nullable reference to {only['$ref']} with no 'type'")
            return {"allOf": [dict(only)], **self.convert(rest, where), "nullable": True, "type": kind}
        if set(only) & set(rest):
            raise Unconvertible(
                where, f"'{key}' and its alternative both stating {sorted(set(only) & set(rest))}"
            )
        merged = self.convert({**only, **rest}, where)
        if "type" not in merged:
            raise Unconvertible(where, f"a nullable '{key}' alternative with no 'type'")
        return {**merged, "nullable": True}


def _operation(operation: dict[str, Any], converter: _SchemaConverter, where: str) -> None:
    _only(operation, OPERATION_FIELDS, where)
    for n, parameter in enumerate(operation.get("parameters", [])):
        _only(parameter, PARAMETER_FIELDS, f"{where} parameters/{n}")
        parameter["schema"] = converter.convert(parameter.get("schema"), f"{where} parameters/{n}/schema")
    if "requestBody" in operation:
        _only(operation["requestBody"], BODY_FIELDS, f"{where} requestBody")
        _content(operation["requestBody"], converter, f"{where} requestBody")
    for status, response in operation.get("responses", {}).items():
        _only(response, RESPONSE_FIELDS, f"{where} responses/{status}")
        _content(response, converter, f"{where} responses/{status}")


def _content(holder: dict[str, Any], converter: _SchemaConverter, where: str) -> None:
    for media_type, media in holder.get("content", {}).items():
        _only(media, MEDIA_FIELDS, f"{where}/content/{media_type}")
        if "schema" in media:
            media["schema"] = converter.convert(media["schema"], f"{where}/content/{media_type}/schema")


def _require(document: dict[str, Any], scheme: OAuth2Scheme) -> None:
    """Wherever an operation requires sign-in, require `scheme` with all its scopes."""
    replaced: set[str] = set()
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            requirements = operation.get("security")
            if not requirements:
                continue
            if not all(requirements):
                raise Unconvertible(f"{method.upper()} {path} security", "an optional sign-in ({})")
            replaced.update(name for requirement in requirements for name in requirement)
            operation["security"] = [{scheme.name: list(scheme.scopes)}]
    schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
    for name in replaced - {scheme.name}:
        schemes.pop(name, None)
    schemes[scheme.name] = scheme.component()
