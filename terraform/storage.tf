# The knowledge index Anvil serves (ANVIL_INDEX, app.tf): one blob, `docs.anvilidx`, in the
# private container `indexes` of a storage account that accepts Entra ID and nothing else. The
# app's identity may read it; whoever provisions (azd's postprovision hook) and the GitHub
# deployment identity (.github/workflows/index.yml) may write it. A new index uploaded there is
# served within ANVIL_INDEX_REFRESH_SECONDS, without a new revision. See docs/deployment.md,
# "Serving your own documents".

locals {
  # 3 to 24 lowercase letters and digits, globally unique: the prefix (cut to 16) + "st" + suffix.
  index_storage_name   = "${substr(replace(var.name_prefix, "-", ""), 0, 16)}st${local.suffix}"
  index_container_name = "indexes"
  index_blob_name      = "docs.anvilidx"
  # https://<account>.blob.core.windows.net/indexes/docs.anvilidx (the endpoint ends with "/").
  index_url = "${azurerm_storage_account.index.primary_blob_endpoint}${azurerm_storage_container.indexes.name}/${local.index_blob_name}"
}

resource "azurerm_storage_account" "index" {
  name                     = local.index_storage_name
  location                 = azurerm_resource_group.anvil.location
  resource_group_name      = azurerm_resource_group.anvil.name
  account_kind             = "StorageV2"
  account_tier             = "Standard"
  account_replication_type = "LRS"
  tags                     = local.tags

  # Entra ID only: no account key or SAS signed with one works, so there is none to leak.
  shared_access_key_enabled       = false
  default_to_oauth_authentication = true
  local_user_enabled              = false
  https_traffic_only_enabled      = true
  min_tls_version                 = "TLS1_2"
  # No container or blob can be made anonymous, whatever its own setting says.
  allow_nested_items_to_be_public  = false
  cross_tenant_replication_enabled = false

  # With private_network, the private endpoint (network.tf) is the way in, and the public
  # endpoint is off unless index_upload_ip_ranges names where uploads come from (a machine
  # running azd outside the network); then only those addresses pass the firewall. Without it,
  # as for Cosmos DB, Container Apps have no fixed outbound address to allow, so the public
  # endpoint stays open and an Entra ID token with a data role is what gets in.
  public_network_access_enabled = !var.private_network || length(var.index_upload_ip_ranges) > 0

  network_rules {
    default_action = var.private_network ? "Deny" : "Allow"
    ip_rules       = var.private_network ? var.index_upload_ip_ranges : []
    bypass         = ["AzureServices"]
  }

  # An upload that replaces the index keeps the previous one as a soft-deleted snapshot for a
  # week, so a bad index can be rolled back (docs/deployment.md); a deleted container likewise.
  blob_properties {
    delete_retention_policy {
      days = 7
    }
    container_delete_retention_policy {
      days = 7
    }
  }
}

# Created through Azure Resource Manager (storage_account_id), not the blob endpoint: Terraform
# needs neither an account key nor a network path to the account for it.
resource "azurerm_storage_container" "indexes" {
  name                  = local.index_container_name
  storage_account_id    = azurerm_storage_account.index.id
  container_access_type = "private"
}

# Anvil's identity reads the index, in this container only.
resource "azurerm_role_assignment" "index_reader" {
  scope                = azurerm_storage_container.indexes.id
  role_definition_name = "Storage Blob Data Reader"
  principal_id         = azurerm_user_assigned_identity.anvil.principal_id
  principal_type       = "ServicePrincipal"
}

# Whoever runs the first provision (the person running `azd up`) may upload the index, which the
# postprovision hook does. Later applies, the deployment workflow's among them, keep this person
# (ignore_changes) rather than hand the role to whoever applies; the workflow's identity has its
# own (github.tf).
resource "azurerm_role_assignment" "index_writer" {
  scope                = azurerm_storage_container.indexes.id
  role_definition_name = "Storage Blob Data Contributor"
  principal_id         = data.azurerm_client_config.current.object_id

  lifecycle {
    ignore_changes = [principal_id]
  }
}
