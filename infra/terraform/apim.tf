# API Management in front of the Container App. Anvil checks every access token itself, so the
# gateway forwards requests, bearer token included, untouched. See docs/deployment.md.

resource "azurerm_api_management" "anvil" {
  # Accepted checkov findings (docs/deployment.md): the gateway is where clients connect.
  #checkov:skip=CKV_AZURE_107:The gateway is the public entry point; the Consumption tier has no virtual network
  #checkov:skip=CKV_AZURE_174:The gateway is the public entry point MCP clients call
  name                = local.apim_name
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  publisher_name      = var.apim_publisher_name
  publisher_email     = var.apim_publisher_email
  sku_name            = var.apim_sku_name
  tags                = var.tags
}

locals {
  # The document `anvil openapi` writes, pointed at the Container App, plus the routes Anvil
  # serves outside it, so that one import defines every operation (operations created beside an
  # imported API are deleted by the next import). Without the two RFC 9728 documents the gateway
  # would answer 404 where VS Code looks for how to sign in; GET and DELETE /mcp reach Anvil,
  # which answers 405 as the MCP transport expects, instead of the gateway's 404.
  openapi = jsondecode(file(var.openapi_path))
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
  backend_url = "https://${azurerm_container_app.anvil.ingress[0].fqdn}"
  openapi_for_gateway = merge(local.openapi, {
    servers = [{ url = local.backend_url }]
    paths = merge(local.openapi.paths, local.openapi_unlisted_paths, {
      "/mcp" = merge(local.openapi.paths["/mcp"], local.openapi_unlisted_mcp_methods)
    })
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
  # user would add nothing the token does not prove. Access control is Anvil's token check.
  subscription_required = false

  import {
    content_format = "openapi+json"
    content_value  = jsonencode(local.openapi_for_gateway)
  }
}

# Pass-through: no `validate-azure-ad-token` here. Anvil validates tokens (signature, issuer,
# audience, tenant, scope) and answers 401 with the `resource_metadata` challenge that lets VS
# Code start sign-in; a gateway check would have to keep the RFC 9728 documents anonymous and
# repeat that challenge in its own 401. `<base />` forwards every header, Authorization included.
resource "azurerm_api_management_api_policy" "anvil" {
  api_name            = azurerm_api_management_api.anvil.name
  api_management_name = azurerm_api_management.anvil.name
  resource_group_name = azurerm_resource_group.anvil.name

  xml_content = <<-XML
    <policies>
      <inbound>
        <base />
      </inbound>
      <backend>
        <base />
      </backend>
      <outbound>
        <base />
      </outbound>
      <on-error>
        <base />
      </on-error>
    </policies>
  XML
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
