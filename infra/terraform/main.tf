# Shared pieces: names, the resource group, logs and the identity Anvil runs as.
# Cosmos DB is in cosmos.tf, the Container App in app.tf, API Management in apim.tf.

data "azurerm_client_config" "current" {}

locals {
  # Cosmos DB and API Management names are global: a suffix fixed per subscription and prefix
  # keeps them unique without a random provider, and stable across applies.
  suffix      = substr(sha1("${data.azurerm_client_config.current.subscription_id}/${var.name_prefix}"), 0, 6)
  app_name    = var.name_prefix
  cosmos_name = "${var.name_prefix}-${local.suffix}"
  apim_name   = "${var.name_prefix}-${local.suffix}"
  # Anvil's defaults for ANVIL_COSMOS_DATABASE and ANVIL_COSMOS_CONTAINER.
  database_name  = "anvil"
  container_name = "conversations"

  # Known before the Container App exists (its FQDN is `<app>.<environment default domain>`), so
  # the app's own settings can name it without a dependency cycle.
  app_fqdn   = "${local.app_name}.${azurerm_container_app_environment.anvil.default_domain}"
  apim_host  = trimprefix(azurerm_api_management.anvil.gateway_url, "https://")
  public_url = coalesce(var.public_url, azurerm_api_management.anvil.gateway_url)
}

resource "azurerm_resource_group" "anvil" {
  name     = "rg-${var.name_prefix}"
  location = var.location
  tags     = var.tags
}

resource "azurerm_log_analytics_workspace" "anvil" {
  name                = "${var.name_prefix}-logs"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  sku                 = "PerGB2018"
  retention_in_days   = var.log_retention_days
  tags                = var.tags
}

# Request telemetry from API Management (apim.tf); Anvil's own logs go to the workspace.
resource "azurerm_application_insights" "anvil" {
  name                = "${var.name_prefix}-appi"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  workspace_id        = azurerm_log_analytics_workspace.anvil.id
  application_type    = "web"
  tags                = var.tags
}

# Anvil signs in to Cosmos DB (and the registry) as this identity: no keys or secrets anywhere.
resource "azurerm_user_assigned_identity" "anvil" {
  name                = "${var.name_prefix}-id"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  tags                = var.tags
}
