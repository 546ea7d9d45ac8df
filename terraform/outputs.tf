# azd copies every output into its environment (.azure/<env>/.env), where hooks and later
# provisions see them; none is named ANVIL_*, because Anvil refuses unknown ANVIL_* variables
# and the preprovision hook runs `anvil openapi` in that environment.

output "AZURE_LOCATION" {
  description = "The region everything runs in."
  value       = azurerm_resource_group.anvil.location
}

output "AZURE_TENANT_ID" {
  description = "The Entra tenant of the app registration."
  value       = data.azuread_client_config.current.tenant_id
}

output "AZURE_RESOURCE_GROUP" {
  description = "The resource group holding everything (azd deploys the service into it)."
  value       = azurerm_resource_group.anvil.name
}

output "AZURE_CONTAINER_REGISTRY_ENDPOINT" {
  description = "Login server of the registry azd and the deployment workflow push the image to."
  value       = azurerm_container_registry.anvil.login_server
}

output "AZURE_CONTAINER_REGISTRY_NAME" {
  description = "Name of the registry (`az acr build --registry`)."
  value       = azurerm_container_registry.anvil.name
}

output "AZURE_CONTAINER_APPS_ENVIRONMENT_ID" {
  description = "The Container Apps environment."
  value       = azurerm_container_app_environment.anvil.id
}

output "MCP_URL" {
  description = "The MCP endpoint clients use, for .vscode/mcp.json."
  value       = local.mcp_url
}

output "PUBLIC_URL" {
  description = "Where clients connect (ANVIL_PUBLIC_URL): the custom domain, or the gateway URL."
  value       = local.public_url
}

output "GATEWAY_URL" {
  description = "The API Management gateway's own URL."
  value       = local.gateway_url
}

output "APP_URL" {
  description = "The Container App's own URL; it accepts only the gateway."
  value       = "https://${azurerm_container_app.anvil.ingress[0].fqdn}"
}

output "ENTRA_CLIENT_ID" {
  description = "Application (client) id of Anvil's API app registration."
  value       = azuread_application.anvil.client_id
}

output "ENTRA_SCOPE" {
  description = "The delegated scope clients request, e.g. `az account get-access-token --scope`."
  value       = local.api_scope
}

output "COSMOS_ENDPOINT" {
  description = "The Cosmos DB account endpoint."
  value       = azurerm_cosmosdb_account.anvil.endpoint
}

output "IDENTITY_CLIENT_ID" {
  description = "Client id of the managed identity Anvil runs as."
  value       = azurerm_user_assigned_identity.anvil.client_id
}

output "LOG_ANALYTICS_WORKSPACE_ID" {
  description = "Workspace (customer) id for `az monitor log-analytics query --workspace`."
  value       = azurerm_log_analytics_workspace.anvil.workspace_id
}

output "GITHUB_DEPLOY_CLIENT_ID" {
  description = "Client id the deployment workflow signs in with (the repository variable AZURE_CLIENT_ID); empty without github_repository."
  value       = try(azurerm_user_assigned_identity.deploy[0].client_id, "")
}

output "INDEX_URL" {
  description = "The knowledge index blob the app serves (ANVIL_INDEX): the target of `anvil index ... --output`, for the postprovision hook and the repository variable INDEX_URL of the index workflow."
  value       = local.index_url
}

output "INDEX_STORAGE_ACCOUNT_NAME" {
  description = "The storage account holding the index (`az storage blob ... --account-name --auth-mode login`)."
  value       = azurerm_storage_account.index.name
}

output "INDEX_CONTAINER_ID" {
  description = "Resource id of the index container: the scope of the Storage Blob Data roles (`az role assignment create --scope`)."
  value       = azurerm_storage_container.indexes.id
}

# Read by azd's postprovision hook, which embeds the index's passages with the same deployment.
output "OPENAI_ENDPOINT" {
  description = "The Azure OpenAI endpoint Anvil answers and embeds with."
  value       = local.openai_endpoint
}

output "OPENAI_CHAT_DEPLOYMENT" {
  description = "The chat model deployment Anvil answers with."
  value       = local.openai_chat_deployment
}

output "OPENAI_EMBEDDING_DEPLOYMENT" {
  description = "The embeddings deployment passages and questions are embedded with."
  value       = local.openai_embedding_deployment
}
