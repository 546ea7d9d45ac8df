# The identity the GitHub workflows (.github/workflows/deploy.yml and index.yml) sign in as, with
# OpenID Connect: no secret is stored anywhere. Created only when var.github_repository is set.
# Its roles are what deploy.yml's `az acr build` and `terraform apply` and index.yml's build
# (embedding with Azure OpenAI) and upload of the knowledge index need, on this deployment's
# resource group only (and an existing Azure OpenAI resource); see docs/deployment.md.

locals {
  github_deploy = var.github_repository != ""
  # A job that names an environment gets an environment subject, whatever its branch.
  github_subject = (
    var.github_environment != ""
    ? "repo:${var.github_repository}:environment:${var.github_environment}"
    : "repo:${var.github_repository}:ref:refs/heads/${var.github_branch}"
  )

  # The roles this configuration assigns inside the resource group: the deployment identity may
  # assign these and no others (built-in role definition ids).
  delegated_roles = {
    "AcrPull"                        = "7f951dda-4ed3-4680-a7ca-43fe172d538d"
    "Monitoring Metrics Publisher"   = "3913510d-42f4-4e42-8a64-420c390055eb"
    "Storage Blob Data Reader"       = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
    "Storage Blob Data Contributor"  = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
    "Cognitive Services OpenAI User" = "5e0bd9bd-7b93-4f28-af87-19fc36ad61bd"
  }
  delegated_role_ids = join(", ", values(local.delegated_roles))

  # Outside the resource group, what a refresh must read (role assignments there) and the state.
  deploy_external_roles = local.github_deploy ? merge(
    var.terraform_state_storage_account_id == "" ? {} : {
      state-data = { scope = var.terraform_state_storage_account_id, role = "Storage Blob Data Contributor" }
      state-read = { scope = var.terraform_state_storage_account_id, role = "Reader" }
    },
    local.custom_domain ? {
      certificate-read = { scope = var.custom_domain_key_vault_id, role = "Reader" }
    } : {},
    # An existing Azure OpenAI resource (openai.tf) is outside the group: reading the role
    # assignments made there.
    local.openai_existing ? {
      openai-read = { scope = var.openai_account_id, role = "Reader" }
    } : {},
  ) : {}

  # Microsoft Graph application permissions: read the app registrations and service principals
  # Terraform refreshes, and change the ones this identity owns (azuread_application_owner).
  deploy_graph_roles = local.github_deploy ? toset(["Application.Read.All", "Application.ReadWrite.OwnedBy"]) : toset([])
}

resource "azurerm_user_assigned_identity" "deploy" {
  count               = local.github_deploy ? 1 : 0
  name                = "${var.name_prefix}-deploy"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  tags                = local.tags
}

resource "azurerm_federated_identity_credential" "github" {
  count               = local.github_deploy ? 1 : 0
  name                = "github-actions"
  resource_group_name = azurerm_resource_group.anvil.name
  parent_id           = azurerm_user_assigned_identity.deploy[0].id
  audience            = ["api://AzureADTokenExchange"]
  issuer              = "https://token.actions.githubusercontent.com"
  subject             = local.github_subject
}

# Every resource in the group, and `az acr build` on the registry.
resource "azurerm_role_assignment" "deploy_contributor" {
  count                = local.github_deploy ? 1 : 0
  scope                = azurerm_resource_group.anvil.id
  role_definition_name = "Contributor"
  principal_id         = azurerm_user_assigned_identity.deploy[0].principal_id
  principal_type       = "ServicePrincipal"
}

# Role assignments in the group, constrained to the roles in local.delegated_roles, so the
# identity cannot make anyone (itself included) Owner.
resource "azurerm_role_assignment" "deploy_role_assignments" {
  count                = local.github_deploy ? 1 : 0
  scope                = azurerm_resource_group.anvil.id
  role_definition_name = "Role Based Access Control Administrator"
  principal_id         = azurerm_user_assigned_identity.deploy[0].principal_id
  principal_type       = "ServicePrincipal"
  condition_version    = "2.0"
  condition            = <<-EOT
    (
      (
        !(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})
      )
      OR
      (
        @Request[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals {${local.delegated_role_ids}}
      )
    )
    AND
    (
      (
        !(ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})
      )
      OR
      (
        @Resource[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals {${local.delegated_role_ids}}
      )
    )
  EOT
}

# index.yml uploads the knowledge index: write access to its container (storage.tf), nothing more.
resource "azurerm_role_assignment" "deploy_index_writer" {
  count                = local.github_deploy ? 1 : 0
  scope                = azurerm_storage_container.indexes.id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = azurerm_user_assigned_identity.deploy[0].principal_id
  principal_type       = "ServicePrincipal"
}

# index.yml's `anvil index` embeds the passages with the app's embeddings deployment (openai.tf):
# calling the deployments of the Azure OpenAI resource, nothing more.
resource "azurerm_role_assignment" "deploy_openai_user" {
  count                = local.github_deploy ? 1 : 0
  scope                = local.openai_account_id
  role_definition_name = "Cognitive Services OpenAI User"
  principal_id         = azurerm_user_assigned_identity.deploy[0].principal_id
  principal_type       = "ServicePrincipal"
}

resource "azurerm_role_assignment" "deploy_external" {
  for_each             = local.deploy_external_roles
  scope                = each.value.scope
  role_definition_name = each.value.role
  principal_id         = azurerm_user_assigned_identity.deploy[0].principal_id
  principal_type       = "ServicePrincipal"
}

# An owner of Anvil's app registration, so Application.ReadWrite.OwnedBy lets it keep the
# registration in step.
resource "azuread_application_owner" "deploy" {
  count           = local.github_deploy ? 1 : 0
  application_id  = azuread_application.anvil.id
  owner_object_id = azurerm_user_assigned_identity.deploy[0].principal_id
}

data "azuread_service_principal" "msgraph" {
  count     = local.github_deploy ? 1 : 0
  client_id = "00000003-0000-0000-c000-000000000000"
}

resource "azuread_app_role_assignment" "deploy_graph" {
  for_each            = local.deploy_graph_roles
  app_role_id         = data.azuread_service_principal.msgraph[0].app_role_ids[each.value]
  principal_object_id = azurerm_user_assigned_identity.deploy[0].principal_id
  resource_object_id  = data.azuread_service_principal.msgraph[0].object_id
}
