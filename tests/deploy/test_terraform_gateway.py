"""API Management in terraform/: the tier, the custom domain, and the routes the gateway publishes.

The gateway imports terraform/openapi.json (`anvil openapi --openapi-version 3.0`), adds the
routes Anvil serves outside that document, and leaves out the health probes. The merge is redone
here with the app's own routes; the checks that need the committed document itself skip until it
exists.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from deploy.terraform_config import TERRAFORM, configuration, locals_, one, resource
from openapi_spec_validator import validate

from app.http.wellknown import WELL_KNOWN
from app.main import create_app
from app.settings import Settings

OPENAPI = TERRAFORM / "openapi.json"
PROBES = {"/healthz", "/readyz"}


def variable(name: str) -> dict[str, Any]:
    (body,) = [block[name] for block in configuration()["variable"] if name in block]
    return dict(body)


def validation_regex(name: str) -> re.Pattern[str]:
    """The `can(regex(...))` pattern of a variable's validation rule (RE2, read as Python's re)."""
    (rule,) = variable(name)["validation"]
    match = re.search(r'can\(regex\("((?:[^"\\]|\\.)*)", var\.' + name + r"\)\)", rule["condition"])
    assert match, rule["condition"]
    return re.compile(match.group(1).encode().decode("unicode_escape"))


def test_only_v2_tiers_that_enforce_tokens_and_limits_are_allowed() -> None:
    pattern = validation_regex("apim_sku_name")
    for allowed in ("BasicV2_1", "StandardV2_1", "StandardV2_10"):
        assert pattern.fullmatch(allowed), allowed
    # Consumption has no rate-limit-by-key, Developer no SLA, classic tiers are being retired.
    for refused in (
        "Consumption_0",
        "Developer_1",
        "Basic_1",
        "Standard_1",
        "Premium_1",
        "BasicV2_0",
        "BasicV2_11",
    ):
        assert not pattern.fullmatch(refused), refused
    assert pattern.fullmatch(variable("apim_sku_name")["default"])
    assert resource("azurerm_api_management")["sku_name"] == "${var.apim_sku_name}"


def test_the_private_network_needs_the_tier_that_joins_one() -> None:
    (precondition,) = one(resource("azurerm_api_management"), "lifecycle")["precondition"]
    assert (
        precondition["condition"] == '${!var.private_network || startswith(var.apim_sku_name, "StandardV2_")}'
    )


def test_the_custom_domain_takes_its_certificate_from_key_vault() -> None:
    domain = resource("azurerm_api_management_custom_domain")
    assert domain["count"] == "${local.custom_domain ? 1 : 0}"
    gateway = one(domain, "gateway")
    assert gateway["host_name"] == "${var.custom_domain_host_name}"
    assert gateway["key_vault_certificate_id"] == "${var.custom_domain_certificate_secret_id}"
    assert "certificate" not in gateway and "certificate_password" not in gateway
    reader = resource("azurerm_role_assignment", "gateway_certificate_reader")
    assert reader["role_definition_name"] == "Key Vault Secrets User"
    assert reader["principal_id"] == "${azurerm_api_management.anvil.identity[0].principal_id}"
    assert one(resource("azurerm_api_management"), "identity")["type"] == "SystemAssigned"
    pattern = validation_regex("custom_domain_host_name")
    assert pattern.fullmatch("anvil.contoso.example")
    assert not pattern.fullmatch("https://anvil.contoso.example")
    assert not pattern.fullmatch("anvil.contoso.example/mcp")


def test_the_api_imports_the_openapi_30_document_without_subscription_keys() -> None:
    api = resource("azurerm_api_management_api")
    imported = one(api, "import")
    assert imported["content_format"] == "openapi+json"
    assert imported["content_value"] == "${jsonencode(local.openapi_for_gateway)}"
    assert locals_()["openapi"] == '${jsondecode(file("${path.module}/${var.openapi_path}"))}'
    assert variable("openapi_path")["default"] == "openapi.json"
    assert api["subscription_required"] is False
    assert api["path"] == ""
    assert api["protocols"] == ["https"]


def test_the_health_probes_are_not_published_on_the_gateway() -> None:
    assert set(locals_()["gateway_unpublished_paths"]) == PROBES
    document = locals_()["openapi_for_gateway"]
    assert "for path, operations in local.openapi_paths : path => operations" in document
    assert "if !contains(local.gateway_unpublished_paths, path)" in document
    # The platform still probes the app directly.
    container = one(one(resource("azurerm_container_app"), "template"), "container")
    assert {
        one(container, probe)["path"] for probe in ("startup_probe", "liveness_probe", "readiness_probe")
    } == PROBES


def gateway_document(document: dict[str, Any]) -> dict[str, Any]:
    """What Terraform's `openapi_for_gateway` makes of a document with Anvil's paths."""
    local = locals_()
    paths = dict(document["paths"])
    assert not set(local["openapi_unlisted_paths"]) & set(paths), "a path the document already lists"
    assert not set(local["openapi_unlisted_mcp_methods"]) & set(paths["/mcp"])
    paths.update(local["openapi_unlisted_paths"])
    paths["/mcp"] = {**paths["/mcp"], **local["openapi_unlisted_mcp_methods"]}
    published = {path: ops for path, ops in paths.items() if path not in local["gateway_unpublished_paths"]}
    return {**document, "paths": published}


@cache
def app_document() -> dict[str, Any]:
    return dict(create_app(Settings(auth_mode="none", store="memory", answer_engine="echo")).openapi())


def test_the_gateway_routes_every_path_anvil_serves_but_the_probes() -> None:
    anvil = create_app(Settings(auth_mode="none", store="memory", answer_engine="echo"))
    served = {
        (route.path, method.lower())
        for route in anvil.routes
        for method in getattr(route, "methods", None) or ()
        if method != "HEAD" and route.path != "/openapi.json"
    } | {("/mcp", "post"), ("/mcp", "get"), ("/mcp", "delete")}
    document = gateway_document(app_document())
    routed = {(path, method) for path, operations in document["paths"].items() for method in operations}
    assert {(path, method) for path, method in served if path not in PROBES} <= routed
    assert not {path for path, _ in routed} & PROBES
    assert {WELL_KNOWN, WELL_KNOWN + "/mcp"} <= set(document["paths"])
    ids = [op["operationId"] for operations in document["paths"].values() for op in operations.values()]
    assert len(ids) == len(set(ids)), "API Management names operations by operationId"


def committed_document() -> dict[str, Any]:
    if not OPENAPI.is_file():
        pytest.skip(
            "terraform/openapi.json is not generated yet: "
            "anvil openapi --openapi-version 3.0 > terraform/openapi.json"
        )
    return dict(json.loads(OPENAPI.read_text(encoding="utf-8")))


def test_the_committed_document_is_openapi_303() -> None:
    document = committed_document()
    assert document["openapi"] == "3.0.3"
    validate(document)
    validate(gateway_document(document))


def test_the_committed_document_has_the_apps_paths_and_operations() -> None:
    document = committed_document()
    assert set(document["paths"]) == set(app_document()["paths"])
    for path, operations in app_document()["paths"].items():
        assert set(document["paths"][path]) == set(operations), path


def test_the_committed_document_is_what_the_generator_writes_now(tmp_path: Path) -> None:
    document = committed_document()
    generated = subprocess.run(
        [str(Path(sys.executable).with_name("anvil")), "openapi", "--openapi-version", "3.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
        # No ANVIL_* variable: the command checks the settings like the server does.
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert json.loads(generated.stdout) == document, (
        "terraform/openapi.json is stale: anvil openapi --openapi-version 3.0 > terraform/openapi.json"
    )
