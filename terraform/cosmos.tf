# Cosmos DB for NoSQL: one serverless account, database `anvil`, container `conversations`.
# Data-plane roles cannot create databases or containers, so Terraform does, and Anvil runs with
# ANVIL_COSMOS_CREATE_IF_MISSING unset (false). See docs/storage.md.

resource "azurerm_cosmosdb_account" "anvil" {
  name                = local.cosmos_name
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  offer_type          = "Standard"
  kind                = "GlobalDocumentDB"
  minimal_tls_version = "Tls12"

  # Entra ID (RBAC) only: the account keys cannot be used, so there is no key to leak or rotate.
  local_authentication_disabled      = true
  access_key_metadata_writes_enabled = false

  # With private_network, only the private endpoint (network.tf) reaches the account. Without
  # it, Container Apps have no fixed outbound address to allow, so the public endpoint stays
  # open and an Entra ID token with a data-plane role is what gets in.
  public_network_access_enabled = !var.private_network

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

  tags = local.tags
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
  # app/stores/cosmos.py): only the fields queries filter or sort on, never the turns,
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

# Cosmos DB Built-in Data Contributor (read and write items) for Anvil's identity, on its one
# container only: nothing else in the account is reachable with Anvil's identity.
resource "azurerm_cosmosdb_sql_role_assignment" "anvil_data_contributor" {
  resource_group_name = azurerm_resource_group.anvil.name
  account_name        = azurerm_cosmosdb_account.anvil.name
  role_definition_id  = "${azurerm_cosmosdb_account.anvil.id}/sqlRoleDefinitions/00000000-0000-0000-0000-000000000002"
  principal_id        = azurerm_user_assigned_identity.anvil.principal_id
  scope               = "${azurerm_cosmosdb_account.anvil.id}/dbs/${azurerm_cosmosdb_sql_database.anvil.name}/colls/${azurerm_cosmosdb_sql_container.conversations.name}"
}
