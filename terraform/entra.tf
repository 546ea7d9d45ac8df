# Anvil's API in Microsoft Entra ID: the app registration whose access tokens Anvil and the
# gateway accept, its `access_as_user` scope, the clients allowed to ask for it without a consent
# prompt, and its service principal. Anvil's ANVIL_ENTRA_* settings (app.tf) and the gateway's
# token check (apim.tf) are read from these resources.

data "azuread_client_config" "current" {}

locals {
  scope_name = "access_as_user"

  # Microsoft's own public clients: VS Code's built-in Microsoft sign-in, and the Azure CLI (for
  # `az account get-access-token`, the smoke test and scripts).
  vscode_client_id    = "aebc6443-996d-45c2-90f0-388ff96faa56"
  azure_cli_client_id = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"
  client_application_ids = distinct(concat(
    [local.vscode_client_id, local.azure_cli_client_id],
    var.client_application_ids,
  ))

  api_identifier_uri = "api://${azuread_application.anvil.client_id}"
  api_scope          = "${local.api_identifier_uri}/${local.scope_name}"
}

resource "random_uuid" "access_as_user" {}

resource "azuread_application" "anvil" {
  display_name     = "Anvil (${var.environment_name})"
  sign_in_audience = "AzureADMyOrg"
  # Whoever creates the registration owns it. Later applies, the deployment workflow's among
  # them, leave the owners alone (lifecycle below): the workflow's identity is added as an owner
  # of its own (azuread_application_owner.deploy) instead of replacing the person.
  owners = [data.azuread_client_config.current.object_id]

  api {
    # v2 tokens: `aud` is the client id, `iss` the tenant's v2.0 issuer.
    requested_access_token_version = 2

    oauth2_permission_scope {
      id                         = random_uuid.access_as_user.result
      value                      = local.scope_name
      type                       = "User"
      enabled                    = true
      admin_consent_display_name = "Use Anvil as the signed-in user"
      admin_consent_description  = "Lets the application ask Anvil questions and keep the signed-in user's conversations."
      user_consent_display_name  = "Use Anvil as you"
      user_consent_description   = "Lets the application ask Anvil questions and keep your conversations."
    }
  }

  # The identifier URIs are resources of their own below: `api://<client id>` names this
  # application's own client id, which an inline list could not refer to.
  lifecycle {
    ignore_changes = [identifier_uris, owners]
  }
}

# `api://<client id>`: the audience of v1 tokens and the resource of the advertised scope.
resource "azuread_application_identifier_uri" "api" {
  application_id = azuread_application.anvil.id
  identifier_uri = local.api_identifier_uri
}

# The public MCP URL, so that the RFC 9728 `resource` VS Code sends to Entra names this
# application. Entra accepts an https identifier only on a domain verified in the tenant, which
# the gateway's own `*.azure-api.net` host can never be (AADSTS9010010): custom domains only.
resource "azuread_application_identifier_uri" "mcp" {
  count          = local.custom_domain ? 1 : 0
  application_id = azuread_application.anvil.id
  identifier_uri = local.mcp_url
}

resource "azuread_application_pre_authorized" "clients" {
  for_each             = toset(local.client_application_ids)
  application_id       = azuread_application.anvil.id
  authorized_client_id = each.value
  permission_ids       = [random_uuid.access_as_user.result]
}

resource "azuread_service_principal" "anvil" {
  client_id                    = azuread_application.anvil.client_id
  app_role_assignment_required = false
  owners                       = [data.azuread_client_config.current.object_id]

  lifecycle {
    ignore_changes = [owners]
  }
}
