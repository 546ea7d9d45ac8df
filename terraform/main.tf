# Shared pieces: names, the resource group, logs and the identity Anvil runs as.
# Entra ID is in entra.tf, Cosmos DB in cosmos.tf, the registry in registry.tf, the Container App
# in app.tf, API Management in apim.tf, the private network in network.tf and the GitHub
# deployment identity in github.tf.

data "azurerm_client_config" "current" {}

locals {
  # Globally unique names (Cosmos DB, API Management, the registry) get a suffix fixed per
  # subscription and environment: unique without a random provider, and stable across applies.
  suffix         = substr(sha1("${data.azurerm_client_config.current.subscription_id}/${var.environment_name}/${var.name_prefix}"), 0, 6)
  app_name       = var.name_prefix
  cosmos_name    = "${var.name_prefix}-${local.suffix}"
  apim_name      = "${var.name_prefix}-${local.suffix}"
  registry_name  = "${replace(var.name_prefix, "-", "")}${local.suffix}"
  database_name  = "anvil"
  container_name = "conversations"

  # azd finds the resource group by `azd-env-name` and the Container App by `azd-service-name`
  # (the service's name in azure.yaml).
  tags         = merge(var.tags, { "azd-env-name" = var.environment_name })
  service_name = "anvil"

  # Until azd or the deployment workflow builds the real image, a public one: Terraform needs an
  # image to create the Container App at all.
  placeholder_image = "mcr.microsoft.com/k8se/quickstart:latest"
  image             = var.image == "" ? local.placeholder_image : var.image

  # Known before the Container App exists (its FQDN is `<app>.<environment default domain>`), so
  # the app's own settings can name it without a dependency cycle.
  app_fqdn      = "${local.app_name}.${azurerm_container_app_environment.anvil.default_domain}"
  custom_domain = var.custom_domain_host_name != ""
  gateway_url   = azurerm_api_management.anvil.gateway_url
  gateway_host  = trimprefix(local.gateway_url, "https://")
  public_url    = local.custom_domain ? "https://${var.custom_domain_host_name}" : local.gateway_url
  mcp_url       = "${local.public_url}/mcp"
}

resource "azurerm_resource_group" "anvil" {
  name     = "rg-${var.environment_name}"
  location = var.location
  tags     = local.tags
}

resource "azurerm_log_analytics_workspace" "anvil" {
  name                = "${var.name_prefix}-logs"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  sku                 = "PerGB2018"
  retention_in_days   = var.log_retention_days
  tags                = local.tags
}

# Anvil's traces, metrics and logs (sent as its identity) and API Management's request telemetry.
resource "azurerm_application_insights" "anvil" {
  name                = "${var.name_prefix}-appi"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  workspace_id        = azurerm_log_analytics_workspace.anvil.id
  application_type    = "web"
  tags                = local.tags
}

# Anvil signs in to Cosmos DB, the registry and Application Insights as this identity: no keys or
# secrets anywhere.
resource "azurerm_user_assigned_identity" "anvil" {
  name                = "${var.name_prefix}-id"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  tags                = local.tags
}
