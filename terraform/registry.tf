# The registry the image is built in (`az acr build`, azd's remote build) and pulled from. No
# admin user: pushes sign in with Entra ID, and the Container App pulls as its managed identity.

resource "azurerm_container_registry" "anvil" {
  name                = local.registry_name
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  sku                 = "Basic"
  admin_enabled       = false
  tags                = local.tags
}

resource "azurerm_role_assignment" "acr_pull" {
  scope                = azurerm_container_registry.anvil.id
  role_definition_name = "AcrPull"
  principal_id         = azurerm_user_assigned_identity.anvil.principal_id
  principal_type       = "ServicePrincipal"
}
