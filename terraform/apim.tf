# API Management in front of the Container App: the only way in. It checks every access token
# (validate-azure-ad-token), limits each user by the token's `oid`, answers a missing or bad
# token with the 401 challenge VS Code needs to start sign-in, and forwards what passes, token
# included, to Anvil, which checks the token again. See docs/deployment.md.

resource "azurerm_api_management" "anvil" {
  name                = local.apim_name
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  publisher_name      = var.apim_publisher_name
  publisher_email     = var.apim_publisher_email
  sku_name            = var.apim_sku_name
  tags                = local.tags

  # Reads the custom domain's certificate from Key Vault.
  identity {
    type = "SystemAssigned"
  }

  # private_network: outbound integration with the virtual network (StandardV2), so the gateway
  # reaches the internal Container Apps environment. The gateway itself stays public.
  virtual_network_type = var.private_network ? "External" : "None"

  dynamic "virtual_network_configuration" {
    for_each = azurerm_subnet.gateway
    content {
      subnet_id = virtual_network_configuration.value.id
    }
  }

  lifecycle {
    precondition {
      condition     = !var.private_network || startswith(var.apim_sku_name, "StandardV2_")
      error_message = "private_network needs apim_sku_name StandardV2_<n>: only StandardV2 integrates with a virtual network."
    }
  }
}

# The custom domain, with its certificate from Key Vault (var.custom_domain_*).
resource "azurerm_role_assignment" "gateway_certificate_reader" {
  count                = local.custom_domain ? 1 : 0
  scope                = var.custom_domain_key_vault_id
  role_definition_name = "Key Vault Secrets User"
  principal_id         = azurerm_api_management.anvil.identity[0].principal_id
  principal_type       = "ServicePrincipal"
}

resource "azurerm_api_management_custom_domain" "anvil" {
  count             = local.custom_domain ? 1 : 0
  api_management_id = azurerm_api_management.anvil.id

  gateway {
    host_name                = var.custom_domain_host_name
    key_vault_certificate_id = var.custom_domain_certificate_secret_id
    default_ssl_binding      = true
  }

  depends_on = [azurerm_role_assignment.gateway_certificate_reader]

  lifecycle {
    precondition {
      condition     = var.custom_domain_key_vault_id != "" && var.custom_domain_certificate_secret_id != ""
      error_message = "custom_domain_host_name needs custom_domain_key_vault_id and custom_domain_certificate_secret_id."
    }
  }
}

locals {
  # The document `anvil openapi --openapi-version 3.0` writes, pointed at the Container App, plus
  # the routes Anvil serves outside it, so that one import defines every operation (operations
  # created beside an imported API are deleted by the next import). Without the two RFC 9728
  # documents the gateway would answer 404 where VS Code looks for how to sign in; GET and
  # DELETE /mcp reach Anvil, which answers 405 as the MCP transport expects.
  openapi = jsondecode(file("${path.module}/${var.openapi_path}"))
  openapi_unlisted_paths = {
    "/.well-known/oauth-protected-resource" = {
      get = {
        operationId = "protectedResourceMetadata"
        summary     = "OAuth protected resource metadata (RFC 9728), anonymous"
        responses   = { "200" = { description = "The metadata document" } }
      }
    }
    "/.well-known/oauth-protected-resource/mcp" = {
      get = {
        operationId = "protectedResourceMetadataMcp"
        summary     = "OAuth protected resource metadata (RFC 9728) of /mcp, anonymous"
        responses   = { "200" = { description = "The metadata document" } }
      }
    }
  }
  openapi_unlisted_mcp_methods = {
    get = {
      operationId = "mcpGet"
      summary     = "No server-initiated stream (405)"
      responses   = { "405" = { description = "Method not allowed" } }
    }
    delete = {
      operationId = "mcpDelete"
      summary     = "No sessions to end (405)"
      responses   = { "405" = { description = "Method not allowed" } }
    }
  }
  # The platform's probes call the Container App directly; on the gateway these paths would tell
  # anyone on the internet whether Cosmos DB and Entra are reachable.
  gateway_unpublished_paths = ["/healthz", "/readyz"]
  # Operations any caller may use without a token: how to sign in.
  anonymous_operations = ["protectedResourceMetadata", "protectedResourceMetadataMcp"]

  backend_url = "https://${azurerm_container_app.anvil.ingress[0].fqdn}"
  openapi_paths = merge(local.openapi.paths, local.openapi_unlisted_paths, {
    "/mcp" = merge(local.openapi.paths["/mcp"], local.openapi_unlisted_mcp_methods)
  })
  openapi_for_gateway = merge(local.openapi, {
    servers = [{ url = local.backend_url }]
    paths = {
      for path, operations in local.openapi_paths : path => operations
      if !contains(local.gateway_unpublished_paths, path)
    }
  })
}

resource "azurerm_api_management_api" "anvil" {
  name                = "anvil"
  resource_group_name = azurerm_resource_group.anvil.name
  api_management_name = azurerm_api_management.anvil.name
  revision            = "1"
  display_name        = "Anvil"
  # At the gateway's root, so the gateway URL is Anvil's public URL: /mcp, /api/... and the
  # /.well-known documents keep the paths Anvil gives them.
  path        = ""
  protocols   = ["https"]
  service_url = local.backend_url

  # MCP clients such as VS Code send the bearer token and nothing else; a subscription key per
  # user would add nothing the token does not prove. Access control is the token check.
  subscription_required = false

  import {
    content_format = "openapi+json"
    content_value  = jsonencode(local.openapi_for_gateway)
  }
}

# Every operation: a valid Entra token for Anvil's API with the scope, from an allowed client;
# per-user rate limit and quota; the RFC 9728 challenge on 401.
resource "azurerm_api_management_api_policy" "anvil" {
  api_name            = azurerm_api_management_api.anvil.name
  api_management_name = azurerm_api_management.anvil.name
  resource_group_name = azurerm_resource_group.anvil.name

  xml_content = templatefile("${path.module}/policies/api.xml.tftpl", {
    tenant_id                 = data.azuread_client_config.current.tenant_id
    client_id                 = azuread_application.anvil.client_id
    scope                     = local.scope_name
    client_application_ids    = local.client_application_ids
    resource_metadata_url     = "${local.public_url}/.well-known/oauth-protected-resource/mcp"
    rate_limit_calls          = var.rate_limit_calls
    rate_limit_period_seconds = var.rate_limit_period_seconds
    quota_calls               = var.quota_calls
    quota_period_seconds      = var.quota_period_seconds
  })
}

# The sign-in metadata: anonymous (no token check), limited per client address instead.
resource "azurerm_api_management_api_operation_policy" "anonymous" {
  for_each            = toset(local.anonymous_operations)
  api_name            = azurerm_api_management_api.anvil.name
  api_management_name = azurerm_api_management.anvil.name
  resource_group_name = azurerm_resource_group.anvil.name
  operation_id        = each.value

  xml_content = templatefile("${path.module}/policies/anonymous.xml.tftpl", {
    rate_limit_calls          = var.rate_limit_calls
    rate_limit_period_seconds = var.rate_limit_period_seconds
  })
}

resource "azurerm_api_management_logger" "appinsights" {
  name                = "appinsights"
  api_management_name = azurerm_api_management.anvil.name
  resource_group_name = azurerm_resource_group.anvil.name
  resource_id         = azurerm_application_insights.anvil.id

  application_insights {
    connection_string = azurerm_application_insights.anvil.connection_string
  }
}

# Request telemetry (status, duration, operation) to Application Insights. No headers and no
# bodies are logged: the Authorization header carries the caller's token, bodies their questions.
resource "azurerm_api_management_api_diagnostic" "anvil" {
  identifier                = "applicationinsights"
  resource_group_name       = azurerm_resource_group.anvil.name
  api_management_name       = azurerm_api_management.anvil.name
  api_name                  = azurerm_api_management_api.anvil.name
  api_management_logger_id  = azurerm_api_management_logger.appinsights.id
  sampling_percentage       = 100
  always_log_errors         = true
  log_client_ip             = false
  verbosity                 = "information"
  http_correlation_protocol = "W3C"
}
