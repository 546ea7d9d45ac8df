"""The Terraform in infra/terraform matches what Anvil expects of Azure.

`terraform validate` needs the provider, which needs a registry; these tests need neither. They
parse every .tf file with python-hcl2 and compare what matters with the code itself: the Cosmos DB
container with `app/conversations/cosmos.py`, the Container App's settings with
`app.settings.Settings`, the gateway's routes with the app's.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import hcl2
import pytest

from app.adapters.stores.cosmos import INDEXING_POLICY
from app.main import WELL_KNOWN, create_app
from app.settings import Settings

TERRAFORM = Path(__file__).resolve().parents[2] / "infra" / "terraform"
SETTINGS = {"ANVIL_" + name.upper() for name in Settings.model_fields}
DATA_CONTRIBUTOR = "00000000-0000-0000-0000-000000000002"


def load(path: Path) -> dict[str, Any]:
    """One .tf file as python-hcl2 4.x shapes it: bare strings, blocks as lists, no comments."""
    # Newer python-hcl2 releases keep quotes, comments and block markers unless told otherwise.
    options = getattr(hcl2, "SerializationOptions", None)
    extra: dict[str, Any] = {}
    if options is not None:
        extra["serialization_options"] = options(
            with_comments=False, explicit_blocks=False, preserve_heredocs=False, strip_string_quotes=True
        )
    with path.open(encoding="utf-8") as file:
        return dict(hcl2.load(file, **extra))


@cache
def configuration() -> dict[str, list[dict[str, Any]]]:
    """Every top-level block kind (resource, data, locals, ...) across all the .tf files."""
    merged: dict[str, list[dict[str, Any]]] = {}
    files = sorted(TERRAFORM.glob("*.tf"))
    assert files, f"no .tf files in {TERRAFORM}"
    for path in files:
        for kind, found in load(path).items():
            merged.setdefault(kind, []).extend(found)
    return merged


def blocks(kind: str, type_: str) -> dict[str, dict[str, Any]]:
    """Resources (or data sources) of one type, by name."""
    found: dict[str, dict[str, Any]] = {}
    for block in configuration().get(kind, []):
        found.update(block.get(type_, {}))
    return found


def resource(type_: str) -> dict[str, Any]:
    """The one resource of this type."""
    found = blocks("resource", type_)
    assert len(found) == 1, f"expected one {type_}, found {sorted(found)}"
    return next(iter(found.values()))


def locals_() -> dict[str, Any]:
    return {key: value for block in configuration().get("locals", []) for key, value in block.items()}


def resolve(value: Any) -> Any:
    """A `${local.x}` value replaced by the local's own value (one level)."""
    match = re.fullmatch(r"\$\{local\.(\w+)\}", value) if isinstance(value, str) else None
    return locals_()[match.group(1)] if match else value


def one(body: dict[str, Any], name: str) -> dict[str, Any]:
    """A nested block that appears once."""
    (block,) = body[name]
    assert isinstance(block, dict)
    return block


def container() -> dict[str, Any]:
    return one(one(resource("azurerm_container_app"), "template"), "container")


def app_env() -> dict[str, str]:
    pairs = [(env["name"], env["value"]) for env in container()["env"]]
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), f"a variable is set twice: {names}"
    return dict(pairs)


def walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in nested dicts and lists."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def test_every_file_parses_and_the_provider_is_pinned() -> None:
    (terraform,) = configuration()["terraform"]
    (providers,) = terraform["required_providers"]
    azurerm = providers["azurerm"]
    assert azurerm["source"] == "hashicorp/azurerm"
    assert re.fullmatch(r"~> 4\.\d+", azurerm["version"]), azurerm["version"]


def test_references_name_declared_variables_locals_and_resources() -> None:
    text = "\n".join(path.read_text(encoding="utf-8") for path in sorted(TERRAFORM.glob("*.tf")))
    declared_vars = {name for block in configuration()["variable"] for name in block}
    # Used outside their own declarations, and nothing undeclared.
    uses = re.sub(r'(?ms)^variable "\w+" \{.*?^\}', "", text)
    assert set(re.findall(r"\bvar\.(\w+)", uses)) == declared_vars
    assert set(re.findall(r"\blocal\.(\w+)", text)) <= set(locals_())
    resources = {(t, n) for block in configuration()["resource"] for t, named in block.items() for n in named}
    data = {(t, n) for block in configuration().get("data", []) for t, named in block.items() for n in named}
    assert set(re.findall(r"(?<![\w.])(azurerm_\w+)\.(\w+)", text)) <= resources
    assert set(re.findall(r"\bdata\.(azurerm_\w+)\.(\w+)", text)) <= data


def test_cosmos_account_is_serverless_session_and_entra_only() -> None:
    account = resource("azurerm_cosmosdb_account")
    assert account["local_authentication_disabled"] is True
    assert "EnableServerless" in [capability["name"] for capability in account["capabilities"]]
    assert one(account, "consistency_policy")["consistency_level"] == "Session"


def test_container_is_the_one_the_store_expects() -> None:
    sql = resource("azurerm_cosmosdb_sql_container")
    assert sql["partition_key_paths"] == ["/oid"]
    assert sql["default_ttl"] == 2592000
    defaults = Settings.model_fields
    assert resolve(sql["name"]) == defaults["cosmos_container"].default
    assert resolve(resource("azurerm_cosmosdb_sql_database")["name"]) == defaults["cosmos_database"].default


def test_indexing_policy_is_the_one_anvil_creates() -> None:
    policy = one(resource("azurerm_cosmosdb_sql_container"), "indexing_policy")
    assert policy["indexing_mode"] == INDEXING_POLICY["indexingMode"]
    included = [path["path"] for path in policy["included_path"]]
    excluded = [path["path"] for path in policy["excluded_path"]]
    assert included == [path["path"] for path in INDEXING_POLICY["includedPaths"]]
    assert excluded == [path["path"] for path in INDEXING_POLICY["excludedPaths"]]


def test_identity_gets_cosmos_data_contributor_on_the_account() -> None:
    assignment = resource("azurerm_cosmosdb_sql_role_assignment")
    assert assignment["role_definition_id"].endswith(f"/sqlRoleDefinitions/{DATA_CONTRIBUTOR}")
    assert assignment["scope"] == "${azurerm_cosmosdb_account.anvil.id}"
    assert assignment["principal_id"] == "${azurerm_user_assigned_identity.anvil.principal_id}"


def test_container_app_scales_to_zero_with_the_identity_attached() -> None:
    app = resource("azurerm_container_app")
    template = one(app, "template")
    assert template["min_replicas"] == 0
    assert template["max_replicas"] == "${var.max_replicas}"
    identity = one(app, "identity")
    assert identity["type"] == "UserAssigned"
    assert identity["identity_ids"] == ["${azurerm_user_assigned_identity.anvil.id}"]
    assert app_env()["AZURE_CLIENT_ID"] == "${azurerm_user_assigned_identity.anvil.client_id}"
    ingress = one(app, "ingress")
    assert ingress["external_enabled"] is True
    assert str(ingress["target_port"]) == app_env()["ANVIL_PORT"] == "8000"


def test_every_anvil_variable_on_the_app_is_a_real_setting() -> None:
    anvil = {name for name in app_env() if name.startswith("ANVIL_")}
    assert anvil <= SETTINGS, f"not settings of app.settings.Settings: {sorted(anvil - SETTINGS)}"
    required = {
        "ANVIL_HOST",
        "ANVIL_PORT",
        "ANVIL_PUBLIC_URL",
        "ANVIL_ALLOWED_HOSTS",
        "ANVIL_AUTH_MODE",
        "ANVIL_ENTRA_TENANT_ID",
        "ANVIL_ENTRA_CLIENT_ID",
        "ANVIL_ENTRA_REQUIRED_SCOPES",
        "ANVIL_STORE",
        "ANVIL_COSMOS_ENDPOINT",
    }
    assert required <= anvil, sorted(required - anvil)
    # No account key (local auth is off) and no container creation (data-plane roles cannot).
    assert "ANVIL_COSMOS_KEY" not in anvil
    assert "ANVIL_COSMOS_CREATE_IF_MISSING" not in anvil


# What each interpolated value looks like once Azure has filled it in.
DEPLOYED = {
    "ANVIL_PUBLIC_URL": "https://anvil-1a2b3c.azure-api.net",
    "ANVIL_ALLOWED_HOSTS": "anvil.blue-12ab.westeurope.azurecontainerapps.io:*,anvil-1a2b3c.azure-api.net:*",
    "ANVIL_ENTRA_TENANT_ID": "7f3e9c1a-2b4d-4e6f-8a0b-1c2d3e4f5a6b",
    "ANVIL_ENTRA_CLIENT_ID": "c4a1e2f3-5b6d-4c7e-9f80-a1b2c3d4e5f6",
    "ANVIL_ENTRA_REQUIRED_SCOPES": "access_as_user",
    "ANVIL_COSMOS_ENDPOINT": "https://anvil-1a2b3c.documents.azure.com:443/",
    "ANVIL_COSMOS_DATABASE": "anvil",
    "ANVIL_COSMOS_CONTAINER": "conversations",
}


def test_the_app_settings_pass_anvils_start_up_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.upper().startswith("ANVIL_")]:
        monkeypatch.delenv(name)
    for name, value in app_env().items():
        if name.startswith("ANVIL_"):
            assert "${" not in value or name in DEPLOYED, f"add a deployed example of {name} to DEPLOYED"
            monkeypatch.setenv(name, DEPLOYED[name] if "${" in value else value)
    settings = Settings()
    assert (settings.host, settings.auth_mode, settings.store) == ("0.0.0.0", "entra", "cosmos")
    assert not settings.cosmos_create_if_missing


def test_probes_check_liveness_and_readiness() -> None:
    probes = {kind: one(container(), kind) for kind in ("liveness_probe", "readiness_probe", "startup_probe")}
    assert probes["liveness_probe"]["path"] == "/healthz"
    assert probes["readiness_probe"]["path"] == "/readyz"
    assert probes["startup_probe"]["path"] == "/healthz"
    for probe in probes.values():
        assert (probe["transport"], str(probe["port"])) == ("HTTP", app_env()["ANVIL_PORT"])


def test_gateway_api_imports_the_openapi_document_without_subscription_keys() -> None:
    api = resource("azurerm_api_management_api")
    imported = one(api, "import")
    assert imported["content_format"] == "openapi+json"
    assert imported["content_value"] == "${jsonencode(local.openapi_for_gateway)}"
    assert locals_()["openapi"] == "${jsondecode(file(var.openapi_path))}"
    assert api["subscription_required"] is False
    assert api["path"] == ""


def gateway_document() -> dict[str, Any]:
    """What Terraform's `openapi_for_gateway` merge makes of the document `anvil openapi` prints."""
    anvil = create_app(Settings(auth_mode="none", store="memory", answer_engine="echo"))
    document = anvil.openapi()
    local = locals_()
    paths = dict(document["paths"])
    assert not set(local["openapi_unlisted_paths"]) & set(paths), "a path the document already lists"
    assert not set(local["openapi_unlisted_mcp_methods"]) & set(paths["/mcp"])
    paths.update(local["openapi_unlisted_paths"])
    paths["/mcp"] = {**paths["/mcp"], **local["openapi_unlisted_mcp_methods"]}
    return {**document, "paths": paths}


def test_gateway_routes_every_path_anvil_serves() -> None:
    anvil = create_app(Settings(auth_mode="none", store="memory", answer_engine="echo"))
    served = {
        (route.path, method.lower())
        for route in anvil.routes
        for method in getattr(route, "methods", None) or ()
        if method != "HEAD" and route.path != "/openapi.json"
    } | {("/mcp", "post"), ("/mcp", "get"), ("/mcp", "delete")}
    document = gateway_document()
    routed = {(path, method) for path, operations in document["paths"].items() for method in operations}
    assert served <= routed, sorted(served - routed)
    assert {WELL_KNOWN, WELL_KNOWN + "/mcp"} <= set(document["paths"])
    ids = [op["operationId"] for operations in document["paths"].values() for op in operations.values()]
    assert len(ids) == len(set(ids)), "API Management names operations by operationId"


def test_gateway_policy_passes_the_token_through() -> None:
    policy = resource("azurerm_api_management_api_policy")
    tags = {element.tag for element in ET.fromstring(policy["xml_content"]).iter()}
    # Only the sections and <base />: no token validation, no header rewriting.
    assert tags <= {"policies", "inbound", "backend", "outbound", "on-error", "base"}, tags


def test_gateway_telemetry_logs_no_headers() -> None:
    diagnostic = resource("azurerm_api_management_api_diagnostic")
    assert not [value for key, value in walk(diagnostic) if key == "headers_to_log"]


def test_outputs_name_the_urls_and_ids_operators_need() -> None:
    outputs = {name for block in configuration()["output"] for name in block}
    assert {"app_url", "apim_url", "cosmos_endpoint", "identity_client_id"} <= outputs


def test_the_app_sends_telemetry_to_application_insights_as_its_identity() -> None:
    env = app_env()
    assert (
        env["APPLICATIONINSIGHTS_CONNECTION_STRING"]
        == "${azurerm_application_insights.anvil.connection_string}"
    )
    assert env["ANVIL_TELEMETRY_AAD_AUTH"] == "true"
    assert env["AZURE_CLIENT_ID"] == "${azurerm_user_assigned_identity.anvil.client_id}"
    publisher = blocks("resource", "azurerm_role_assignment")["telemetry_publisher"]
    assert publisher["role_definition_name"] == "Monitoring Metrics Publisher"
    assert publisher["scope"] == "${azurerm_application_insights.anvil.id}"
    assert publisher["principal_id"] == "${azurerm_user_assigned_identity.anvil.principal_id}"
    # Every ANVIL_ variable the app gets names a setting Anvil has.
    names = [name.removeprefix("ANVIL_").lower() for name in env if name.startswith("ANVIL_")]
    assert all(name in Settings.model_fields for name in names)
