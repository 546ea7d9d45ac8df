"""The azurerm, azuread and random provider schemas, read offline from the CDK for Terraform packages.

`@cdktf/provider-azurerm`, `@cdktf/provider-azuread` and `@cdktf/provider-random` (package.json) are
generated from the providers' own schemas. Their `.jsii` manifests list, for every resource and
data source, the arguments of its configuration (camelCase of the HCL names), which of them are
nested blocks and what those contain, and the attributes a reference may read. `check()` walks a
parsed configuration against that, so a misspelt argument, a block at the wrong level or a
reference to an attribute the provider does not export fails without any registry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "azurerm": "@cdktf/provider-azurerm",
    "azuread": "@cdktf/provider-azuread",
    "random": "@cdktf/provider-random",
}
# Arguments Terraform itself gives every resource and data source.
META_ARGUMENTS = {"count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"}
REGISTRY_LINK = re.compile(
    r"\{@link https://registry\.terraform\.io/providers/\S+?/docs(?:/(resources|data-sources)/\w+)? (\w+)\}"
)


def camel(name: str) -> str:
    """The jsii property name of an HCL argument (`ip_address_range` -> `ipAddressRange`)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True)
class Struct:
    """The arguments of one configuration object: each one's jsii type."""

    fqn: str
    properties: Mapping[str, Any]
    required: frozenset[str] = frozenset()


@dataclass
class Schema:
    """One provider package: its structs and its resource, data source and provider classes."""

    provider: str
    version: str
    types: Mapping[str, Any]
    resources: dict[str, str] = field(default_factory=dict)
    data_sources: dict[str, str] = field(default_factory=dict)
    provider_class: str = ""

    def struct(self, fqn: str) -> Struct:
        found = self.types[fqn].get("properties", [])
        required = frozenset(prop["name"] for prop in found if not prop.get("optional"))
        return Struct(fqn, {prop["name"]: prop["type"] for prop in found}, required)

    def config_of(self, class_fqn: str) -> Struct:
        """The configuration struct a resource, data source or provider class is built from."""
        parameters = self.types[class_fqn]["initializer"]["parameters"]
        (config,) = [p for p in parameters if p["name"] == "config"]
        return self.struct(config["type"]["fqn"])

    def attributes(self, class_fqn: str) -> set[str]:
        """What a reference may read: the class's properties (generated getters)."""
        return {prop["name"] for prop in self.types[class_fqn].get("properties", [])}


def struct_of(type_: Any) -> str | None:
    """The struct fqn a property holds (alone or in a list), or None for a plain value."""
    if "fqn" in type_:
        return str(type_["fqn"])
    if "collection" in type_:
        return struct_of(type_["collection"]["elementtype"])
    if "union" in type_:
        for option in type_["union"]["types"]:
            fqn = struct_of(option)
            if fqn and not fqn.startswith("cdktf."):
                return fqn
    return None


@cache
def schema(provider: str) -> Schema:
    """The parsed package of one provider (about 90 MB of JSON for azurerm: read once per run)."""
    package = ROOT / "node_modules" / PACKAGES[provider]
    manifest = json.loads((package / ".jsii").read_text(encoding="utf-8"))
    meta = json.loads((package / "package.json").read_text(encoding="utf-8"))
    found = Schema(provider, meta["cdktf"]["provider"]["version"], manifest["types"])
    for fqn, type_ in manifest["types"].items():
        if type_.get("kind") != "class" or "initializer" not in type_:
            continue
        link = REGISTRY_LINK.search(type_.get("docs", {}).get("summary", ""))
        if not link:
            continue
        kind, name = link.groups()
        if kind == "resources":
            found.resources[name] = fqn
        elif kind == "data-sources":
            found.data_sources[name] = fqn
        elif name == provider:
            found.provider_class = fqn
    return found


@cache
def backend_struct(backend: str) -> Struct:
    """A backend's settings, from the `cdktf` package the providers depend on."""
    manifest = json.loads((ROOT / "node_modules" / "cdktf" / ".jsii").read_text(encoding="utf-8"))
    fqn = f"cdktf.{backend[:1].upper()}{backend[1:]}BackendConfig"
    return Struct(fqn, {prop["name"]: prop["type"] for prop in manifest["types"][fqn]["properties"]})


def check_body(where: str, body: Mapping[str, Any], struct: Struct, lookup: Schema | None) -> Iterator[str]:
    """Problems of one block body against its struct; `lookup` resolves nested structs.

    Required arguments are checked too, except in a backend block: its settings may come from
    `terraform init -backend-config` instead.
    """
    given = {camel(name) for name in body} | {
        camel(label) for block in body.get("dynamic", []) for label in block
    }
    if lookup is not None:
        for name in sorted(struct.required - given):
            yield f"{where}: missing required argument {name!r} ({struct.fqn})"
    for name, value in body.items():
        if name == "dynamic":
            for block in value:
                for label, dynamic in block.items():
                    content = dynamic.get("content", [{}])
                    yield from check_nested(f"{where}.dynamic.{label}", label, content, struct, lookup)
            continue
        if name not in struct.properties and camel(name) not in struct.properties:
            yield f"{where}: unknown argument {name!r} ({struct.fqn})"
            continue
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            yield from check_nested(f"{where}.{name}", name, value, struct, lookup)
        elif lookup is not None and not isinstance(value, list | dict):
            nested = struct_of(struct.properties.get(camel(name), struct.properties.get(name, {})))
            if nested is not None and nested in lookup.types:
                yield f"{where}: {name!r} is a block, not an argument ({struct.fqn})"


def check_nested(
    where: str, name: str, blocks: list[dict[str, Any]], parent: Struct, lookup: Schema | None
) -> Iterator[str]:
    type_ = parent.properties.get(camel(name), parent.properties.get(name))
    if type_ is None:
        yield f"{where}: unknown block {name!r} ({parent.fqn})"
        return
    fqn = struct_of(type_)
    if fqn is None or lookup is None or fqn not in lookup.types:
        yield f"{where}: {name!r} is an argument, not a block ({parent.fqn})"
        return
    for block in blocks:
        yield from check_body(where, block, lookup.struct(fqn), lookup)


def provider_of(type_name: str) -> str:
    return type_name.split("_", 1)[0]


def check(config: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    """Every problem in a parsed configuration: unknown resource types, arguments, blocks."""
    problems: list[str] = []
    for kind, table in (("resource", "resources"), ("data", "data_sources")):
        for block in config.get(kind, []):
            for type_name, named in block.items():
                provider = provider_of(type_name)
                if provider not in PACKAGES:
                    problems.append(f"{kind} {type_name}: no schema for provider {provider!r}")
                    continue
                found = schema(provider)
                fqn = getattr(found, table).get(type_name)
                if fqn is None:
                    problems.append(f"{kind} {type_name}: not a {kind} of {provider} {found.version}")
                    continue
                struct = found.config_of(fqn)
                for name, body in named.items():
                    ordinary = {key: value for key, value in body.items() if key not in META_ARGUMENTS}
                    problems += check_body(f"{kind}.{type_name}.{name}", ordinary, struct, found)
    for block in config.get("provider", []):
        for provider, body in block.items():
            if provider not in PACKAGES:
                problems.append(f"provider {provider}: no schema")
                continue
            found = schema(provider)
            problems += check_body(f"provider.{provider}", body, found.config_of(found.provider_class), found)
    for block in config.get("terraform", []):
        for backend_block in block.get("backend", []):
            for backend, body in backend_block.items():
                problems += check_body(f"terraform.backend.{backend}", body, backend_struct(backend), None)
    return problems


def check_references(references: set[tuple[str, str, str, str | None]]) -> list[str]:
    """References to attributes the resource or data source does not export."""
    problems = []
    for kind, type_name, name, attribute in sorted(references, key=str):
        if kind not in ("resource", "data") or attribute is None:
            continue
        provider = provider_of(type_name)
        if provider not in PACKAGES:
            problems.append(f"{type_name}.{name}: no schema for provider {provider!r}")
            continue
        found = schema(provider)
        fqn = (found.resources if kind == "resource" else found.data_sources).get(type_name)
        if fqn is None:
            problems.append(f"{kind} {type_name}: unknown to {provider} {found.version}")
            continue
        getters = found.attributes(fqn)
        if camel(attribute) not in getters and camel(attribute) + "Attribute" not in getters:
            problems.append(f"{type_name}.{name}.{attribute}: {type_name} has no attribute {attribute!r}")
    return problems
