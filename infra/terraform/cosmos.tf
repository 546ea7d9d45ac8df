# Cosmos DB for NoSQL: one serverless account, database `anvil`, container `conversations`.
# Data-plane roles cannot create databases or containers, so Terraform does, and Anvil runs with
# ANVIL_COSMOS_CREATE_IF_MISSING unset (false). See docs/storage.md.

resource "azurerm_cosmosdb_account" "anvil" {
  # Accepted checkov findings (docs/deployment.md): the Container Apps environment has no virtual
  # network or fixed outbound address, so the account takes public connections, and only Entra ID
  # tokens with a data-plane role get in. Microsoft-managed keys encrypt the data at rest.
  #checkov:skip=CKV_AZURE_99:No fixed outbound addresses to allow; access is Entra ID RBAC only
  #checkov:skip=CKV_AZURE_101:Reached over its public endpoint from Container Apps; Entra ID RBAC only
  #checkov:skip=CKV_AZURE_100:Microsoft-managed encryption keys; customer-managed keys are optional hardening
  name                = local.cosmos_name
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  offer_type          = "Standard"
  kind                = "GlobalDocumentDB"
  minimal_tls_version = "Tls12"

  # Entra ID (RBAC) only: the account keys cannot be used, so there is no key to leak or rotate.
  local_authentication_disabled      = true
  access_key_metadata_writes_enabled = false

  capabilities {
    name = "EnableServerless"
  }

  # Per client instance; with several replicas Anvil relies on ETags, not read-your-writes.
  consistency_policy {
    consistency_level = "Session"
  }

  geo_location {
    location          = azurerm_resource_group.anvil.location
    failover_priority = 0
  }

  tags = var.tags
}

resource "azurerm_cosmosdb_sql_database" "anvil" {
  name                = local.database_name
  resource_group_name = azurerm_resource_group.anvil.name
  account_name        = azurerm_cosmosdb_account.anvil.name
}

resource "azurerm_cosmosdb_sql_container" "conversations" {
  name                  = local.container_name
  resource_group_name   = azurerm_resource_group.anvil.name
  account_name          = azurerm_cosmosdb_account.anvil.name
  database_name         = azurerm_cosmosdb_sql_database.anvil.name
  partition_key_paths   = ["/oid"]
  partition_key_version = 2

  # TTL on, 30 days by default; every item carries its own `ttl` (expiresAt - now), which only
  # applies when the container has a default.
  default_ttl = 2592000

  # The same policy Anvil sets when it creates the container itself (INDEXING_POLICY in
  # app/conversations/cosmos.py): only the fields queries filter or sort on, never the turns,
  # because every indexed path adds to the cost of a write.
  indexing_policy {
    indexing_mode = "consistent"

    included_path {
      path = "/oid/?"
    }
    included_path {
      path = "/tid/?"
    }
    included_path {
      path = "/conversationId/?"
    }
    included_path {
      path = "/updatedAt/?"
    }
    included_path {
      path = "/expiresAt/?"
    }

    excluded_path {
      path = "/*"
    }
  }
}

# Cosmos DB Built-in Data Contributor (read and write items) for Anvil's identity, on the account.
resource "azurerm_cosmosdb_sql_role_assignment" "anvil_data_contributor" {
  resource_group_name = azurerm_resource_group.anvil.name
  account_name        = azurerm_cosmosdb_account.anvil.name
  role_definition_id  = "${azurerm_cosmosdb_account.anvil.id}/sqlRoleDefinitions/00000000-0000-0000-0000-000000000002"
  principal_id        = azurerm_user_assigned_identity.anvil.principal_id
  scope               = azurerm_cosmosdb_account.anvil.id
}
