"""Entra ID in terraform/: the app registration VS Code signs in to, and the GitHub deployment identity.

Anvil's ANVIL_ENTRA_* settings must come from the registration Terraform creates, so there is
nothing to copy by hand; the registration must let VS Code and the Azure CLI ask for the scope;
and the deployment identity may do what the workflow needs and little else.
"""

from __future__ import annotations

import re

from deploy.terraform_config import blocks, configuration, locals_, one, resource

VSCODE = "aebc6443-996d-45c2-90f0-388ff96faa56"
AZURE_CLI = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"


def app_env() -> dict[str, str]:
    container = one(one(resource("azurerm_container_app"), "template"), "container")
    return {env["name"]: env["value"] for env in container["env"]}


def test_the_api_exposes_access_as_user_with_v2_tokens() -> None:
    application = resource("azuread_application")
    api = one(application, "api")
    assert api["requested_access_token_version"] == 2
    (scope,) = api["oauth2_permission_scope"]
    assert scope["value"] == "${local.scope_name}" and locals_()["scope_name"] == "access_as_user"
    assert scope["type"] == "User"
    assert scope["enabled"] is True
    assert scope["id"] == "${random_uuid.access_as_user.result}"
    assert application["sign_in_audience"] == "AzureADMyOrg"
    # The URIs are separate resources; the application must not fight them over the list.
    assert "identifier_uris" in one(application, "lifecycle")["ignore_changes"]
    assert "identifier_uris" not in application


def test_identifier_uris_are_the_api_uri_and_the_public_mcp_url_with_a_custom_domain() -> None:
    uris = blocks("resource", "azuread_application_identifier_uri")
    assert uris["api"]["identifier_uri"] == "${local.api_identifier_uri}"
    assert locals_()["api_identifier_uri"] == "api://${azuread_application.anvil.client_id}"
    # `*.azure-api.net` cannot be verified in a tenant (AADSTS9010010): only a custom domain.
    assert uris["mcp"]["count"] == "${local.custom_domain ? 1 : 0}"
    assert uris["mcp"]["identifier_uri"] == "${local.mcp_url}"
    assert locals_()["custom_domain"] == '${var.custom_domain_host_name != ""}'
    assert locals_()["public_url"].startswith(
        '${local.custom_domain ? "https://${var.custom_domain_host_name}"'
    )
    for uri in uris.values():
        assert uri["application_id"] == "${azuread_application.anvil.id}"


def test_vscode_and_the_azure_cli_are_pre_authorised_for_the_scope() -> None:
    pre = resource("azuread_application_pre_authorized")
    assert pre["for_each"] == "${toset(local.client_application_ids)}"
    assert pre["authorized_client_id"] == "${each.value}"
    assert pre["permission_ids"] == ["${random_uuid.access_as_user.result}"]
    assert (locals_()["vscode_client_id"], locals_()["azure_cli_client_id"]) == (VSCODE, AZURE_CLI)


def test_the_api_has_a_service_principal() -> None:
    principal = resource("azuread_service_principal")
    assert principal["client_id"] == "${azuread_application.anvil.client_id}"


def test_anvils_entra_settings_come_from_the_registration() -> None:
    env = app_env()
    assert env["ANVIL_AUTH_MODE"] == "entra"
    assert env["ANVIL_ENTRA_TENANT_ID"] == "${data.azuread_client_config.current.tenant_id}"
    assert env["ANVIL_ENTRA_CLIENT_ID"] == "${azuread_application.anvil.client_id}"
    assert env["ANVIL_ENTRA_REQUIRED_SCOPES"] == (
        '${join(",", [for scope in azuread_application.anvil.api[0].oauth2_permission_scope : scope.value])}'
    )
    variables = {name for block in configuration()["variable"] for name in block}
    assert not {"entra_tenant_id", "entra_client_id", "entra_required_scopes"} & variables


def test_the_github_identity_trusts_only_the_repositorys_deploy_job() -> None:
    credential = resource("azurerm_federated_identity_credential")
    assert credential["count"] == "${local.github_deploy ? 1 : 0}"
    assert credential["issuer"] == "https://token.actions.githubusercontent.com"
    assert credential["audience"] == ["api://AzureADTokenExchange"]
    assert credential["subject"] == "${local.github_subject}"
    assert credential["parent_id"] == "${azurerm_user_assigned_identity.deploy[0].id}"
    subject = locals_()["github_subject"]
    assert "repo:${var.github_repository}:environment:${var.github_environment}" in subject
    assert "repo:${var.github_repository}:ref:refs/heads/${var.github_branch}" in subject


def test_the_github_identity_gets_only_what_the_workflow_needs() -> None:
    assignments = blocks("resource", "azurerm_role_assignment")
    contributor = assignments["deploy_contributor"]
    assert contributor["role_definition_name"] == "Contributor"
    assert contributor["scope"] == "${azurerm_resource_group.anvil.id}"
    delegation = assignments["deploy_role_assignments"]
    assert delegation["role_definition_name"] == "Role Based Access Control Administrator"
    assert delegation["scope"] == "${azurerm_resource_group.anvil.id}"
    assert delegation["condition_version"] == "2.0"
    # It may assign exactly the roles this configuration assigns in the group, nothing broader.
    condition = delegation["condition"]
    assert condition.count("GuidEquals {${local.delegated_role_ids}}") == 2
    assert "roleAssignments/write" in condition and "roleAssignments/delete" in condition
    delegated = locals_()["delegated_roles"]
    in_group = {
        body["role_definition_name"]
        for name, body in assignments.items()
        if not name.startswith("deploy_") and name != "gateway_certificate_reader"
    }
    assert in_group == set(delegated)
    assert all(
        re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", guid) for guid in delegated.values()
    )
    graph = resource("azuread_app_role_assignment")
    assert graph["for_each"] == "${local.deploy_graph_roles}"
    assert '["Application.Read.All", "Application.ReadWrite.OwnedBy"]' in locals_()["deploy_graph_roles"]
    # It owns the registration it must keep in step, and nothing grants it directory roles.
    owner = resource("azuread_application_owner")
    assert owner["application_id"] == "${azuread_application.anvil.id}"
    assert owner["owner_object_id"] == "${azurerm_user_assigned_identity.deploy[0].principal_id}"
    assert not blocks("resource", "azuread_directory_role_assignment")


def test_a_later_apply_never_takes_the_registration_from_the_person_who_created_it() -> None:
    # The workflow applies as its own identity: owners computed from the caller would replace
    # the person with it on every run.
    application = resource("azuread_application")
    assert application["owners"] == ["${data.azuread_client_config.current.object_id}"]
    assert "owners" in one(application, "lifecycle")["ignore_changes"]
    principal = resource("azuread_service_principal")
    assert "owners" in one(principal, "lifecycle")["ignore_changes"]
