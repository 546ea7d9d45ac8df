# The opt-in private network (var.private_network): the Container Apps environment is internal
# to a virtual network, API Management (StandardV2) reaches it through virtual network
# integration, and Cosmos DB and the knowledge index's blob storage (storage.tf) are reached
# through private endpoints with their public access off. Nothing here exists when
# private_network is false.

locals {
  private_count = var.private_network ? 1 : 0
  # A /23 for the Container Apps environment (the least a consumption-only environment takes),
  # a /27 delegated to API Management's integration, a /27 for private endpoints.
  subnet_apps     = cidrsubnet(var.vnet_address_space, 1, 0)
  subnet_gateway  = cidrsubnet(var.vnet_address_space, 5, 16)
  subnet_endpoint = cidrsubnet(var.vnet_address_space, 5, 17)
}

resource "azurerm_virtual_network" "anvil" {
  count               = local.private_count
  name                = "${var.name_prefix}-vnet"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  address_space       = [var.vnet_address_space]
  tags                = local.tags
}

resource "azurerm_subnet" "apps" {
  count                = local.private_count
  name                 = "container-apps"
  resource_group_name  = azurerm_resource_group.anvil.name
  virtual_network_name = azurerm_virtual_network.anvil[0].name
  address_prefixes     = [local.subnet_apps]
}

# API Management v2 integrates with a subnet delegated to Microsoft.Web/serverFarms.
resource "azurerm_subnet" "gateway" {
  count                = local.private_count
  name                 = "api-management"
  resource_group_name  = azurerm_resource_group.anvil.name
  virtual_network_name = azurerm_virtual_network.anvil[0].name
  address_prefixes     = [local.subnet_gateway]

  delegation {
    name = "api-management"

    service_delegation {
      name    = "Microsoft.Web/serverFarms"
      actions = ["Microsoft.Network/virtualNetworks/subnets/action"]
    }
  }
}

resource "azurerm_subnet" "endpoints" {
  count                = local.private_count
  name                 = "private-endpoints"
  resource_group_name  = azurerm_resource_group.anvil.name
  virtual_network_name = azurerm_virtual_network.anvil[0].name
  address_prefixes     = [local.subnet_endpoint]
}

# One network security group with the default rules (traffic inside the network and from Azure's
# load balancer in, nothing else), on every subnet; API Management's integration requires one.
resource "azurerm_network_security_group" "anvil" {
  count               = local.private_count
  name                = "${var.name_prefix}-nsg"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  tags                = local.tags
}

resource "azurerm_subnet_network_security_group_association" "apps" {
  count                     = local.private_count
  subnet_id                 = azurerm_subnet.apps[0].id
  network_security_group_id = azurerm_network_security_group.anvil[0].id
}

resource "azurerm_subnet_network_security_group_association" "gateway" {
  count                     = local.private_count
  subnet_id                 = azurerm_subnet.gateway[0].id
  network_security_group_id = azurerm_network_security_group.anvil[0].id
}

resource "azurerm_subnet_network_security_group_association" "endpoints" {
  count                     = local.private_count
  subnet_id                 = azurerm_subnet.endpoints[0].id
  network_security_group_id = azurerm_network_security_group.anvil[0].id
}

# The internal environment's apps resolve to its private address only inside the network: a
# zone named after the environment's default domain, linked to the network, sends every app
# name there.
resource "azurerm_private_dns_zone" "apps" {
  count               = local.private_count
  name                = azurerm_container_app_environment.anvil.default_domain
  resource_group_name = azurerm_resource_group.anvil.name
  tags                = local.tags
}

resource "azurerm_private_dns_a_record" "apps" {
  count               = local.private_count
  name                = "*"
  zone_name           = azurerm_private_dns_zone.apps[0].name
  resource_group_name = azurerm_resource_group.anvil.name
  ttl                 = 300
  records             = [azurerm_container_app_environment.anvil.static_ip_address]
}

resource "azurerm_private_dns_zone_virtual_network_link" "apps" {
  count                 = local.private_count
  name                  = "apps"
  resource_group_name   = azurerm_resource_group.anvil.name
  private_dns_zone_name = azurerm_private_dns_zone.apps[0].name
  virtual_network_id    = azurerm_virtual_network.anvil[0].id
  tags                  = local.tags
}

resource "azurerm_private_dns_zone" "cosmos" {
  count               = local.private_count
  name                = "privatelink.documents.azure.com"
  resource_group_name = azurerm_resource_group.anvil.name
  tags                = local.tags
}

resource "azurerm_private_dns_zone_virtual_network_link" "cosmos" {
  count                 = local.private_count
  name                  = "cosmos"
  resource_group_name   = azurerm_resource_group.anvil.name
  private_dns_zone_name = azurerm_private_dns_zone.cosmos[0].name
  virtual_network_id    = azurerm_virtual_network.anvil[0].id
  tags                  = local.tags
}

resource "azurerm_private_endpoint" "cosmos" {
  count               = local.private_count
  name                = "${local.cosmos_name}-pe"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  subnet_id           = azurerm_subnet.endpoints[0].id
  tags                = local.tags

  private_service_connection {
    name                           = "cosmos-sql"
    private_connection_resource_id = azurerm_cosmosdb_account.anvil.id
    subresource_names              = ["Sql"]
    is_manual_connection           = false
  }

  private_dns_zone_group {
    name                 = "cosmos"
    private_dns_zone_ids = [azurerm_private_dns_zone.cosmos[0].id]
  }
}

# The index's storage account, for the app's reads: inside the network its blob host name resolves,
# through Azure's privatelink zone for blob, to the endpoint's private address; outside, to the
# public endpoint, which is off unless index_upload_ip_ranges admits an uploader.
resource "azurerm_private_dns_zone" "blob" {
  count               = local.private_count
  name                = "privatelink.blob.core.windows.net"
  resource_group_name = azurerm_resource_group.anvil.name
  tags                = local.tags
}

resource "azurerm_private_dns_zone_virtual_network_link" "blob" {
  count                 = local.private_count
  name                  = "blob"
  resource_group_name   = azurerm_resource_group.anvil.name
  private_dns_zone_name = azurerm_private_dns_zone.blob[0].name
  virtual_network_id    = azurerm_virtual_network.anvil[0].id
  tags                  = local.tags
}

resource "azurerm_private_endpoint" "blob" {
  count               = local.private_count
  name                = "${azurerm_storage_account.index.name}-blob-pe"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  subnet_id           = azurerm_subnet.endpoints[0].id
  tags                = local.tags

  private_service_connection {
    name                           = "index-blob"
    private_connection_resource_id = azurerm_storage_account.index.id
    subresource_names              = ["blob"]
    is_manual_connection           = false
  }

  private_dns_zone_group {
    name                 = "blob"
    private_dns_zone_ids = [azurerm_private_dns_zone.blob[0].id]
  }
}

# The Azure OpenAI resource (openai.tf: created, or the existing one of openai_account_id), for the
# app's answers and embeddings: inside the network its host name resolves, through the privatelink
# zone for Azure OpenAI, to the endpoint's private address. An existing resource's owner may have
# to approve the connection.
resource "azurerm_private_dns_zone" "openai" {
  count               = local.private_count
  name                = "privatelink.openai.azure.com"
  resource_group_name = azurerm_resource_group.anvil.name
  tags                = local.tags
}

resource "azurerm_private_dns_zone_virtual_network_link" "openai" {
  count                 = local.private_count
  name                  = "openai"
  resource_group_name   = azurerm_resource_group.anvil.name
  private_dns_zone_name = azurerm_private_dns_zone.openai[0].name
  virtual_network_id    = azurerm_virtual_network.anvil[0].id
  tags                  = local.tags
}

resource "azurerm_private_endpoint" "openai" {
  count               = local.private_count
  name                = "${local.openai_name}-pe"
  location            = azurerm_resource_group.anvil.location
  resource_group_name = azurerm_resource_group.anvil.name
  subnet_id           = azurerm_subnet.endpoints[0].id
  tags                = local.tags

  private_service_connection {
    name                           = "openai-account"
    private_connection_resource_id = local.openai_account_id
    subresource_names              = ["account"]
    is_manual_connection           = false
  }

  private_dns_zone_group {
    name                 = "openai"
    private_dns_zone_ids = [azurerm_private_dns_zone.openai[0].id]
  }
}
