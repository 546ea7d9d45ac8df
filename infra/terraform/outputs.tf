output "app_url" {
  description = "The Container App's own HTTPS URL (API Management's backend)."
  value       = "https://${azurerm_container_app.anvil.ingress[0].fqdn}"
}

output "apim_url" {
  description = "The API Management gateway URL."
  value       = azurerm_api_management.anvil.gateway_url
}

output "public_url" {
  description = "ANVIL_PUBLIC_URL: where clients connect; the MCP endpoint is this plus /mcp."
  value       = local.public_url
}

output "mcp_url" {
  description = "The MCP endpoint for .vscode/mcp.json."
  value       = "${local.public_url}/mcp"
}

output "cosmos_endpoint" {
  description = "The Cosmos DB account endpoint (ANVIL_COSMOS_ENDPOINT)."
  value       = azurerm_cosmosdb_account.anvil.endpoint
}

output "identity_client_id" {
  description = "Client id of the managed identity Anvil runs as (AZURE_CLIENT_ID)."
  value       = azurerm_user_assigned_identity.anvil.client_id
}

output "resource_group_name" {
  description = "The resource group holding everything above."
  value       = azurerm_resource_group.anvil.name
}

output "log_analytics_workspace_id" {
  description = "Workspace (customer) id for `az monitor log-analytics query --workspace`."
  value       = azurerm_log_analytics_workspace.anvil.workspace_id
}
