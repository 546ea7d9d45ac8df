# The Azure OpenAI model Anvil answers with and embeds with: one account (kind OpenAI) and two
# deployments, a chat model (ANVIL_ANSWER_ENGINE=azure-openai) and an embeddings model
# (ANVIL_EMBEDDINGS=azure-openai, for questions here and for passages in `anvil index`). No key
# exists: local authentication is off, and the app signs in as its managed identity, which holds
# Cognitive Services OpenAI User on the account. See docs/deployment.md, "Answers from your own
# Azure OpenAI model".
#
# With var.openai_account_id, nothing here is created: the app uses that existing resource, at
# var.openai_endpoint, and the deployments var.openai_chat_deployment and
# var.openai_embedding_deployment its owner made there. The endpoint is given rather than read
# with a data source: a data source finds an account only in the provider's subscription and
# needs read access to it at every plan, while the id and the endpoint work from any subscription
# of the tenant. The app's and the deployment identity's role assignments (and, with
# private_network, the private endpoint) are made on that resource all the same.

locals {
  openai_existing = var.openai_account_id != ""
  openai_count    = local.openai_existing ? 0 : 1
  # Globally unique: the custom subdomain, which Entra ID sign-in requires, is the account name.
  openai_name = "${var.name_prefix}-openai-${local.suffix}"
  # An index records the embeddings deployment's name as its embedder: a name that changes with
  # the model makes the app refuse an index of another model's vectors, and `anvil index` embed
  # every passage again, rather than reuse vectors of the old model.
  openai_embedding_name = (
    var.openai_embedding_deployment != ""
    ? var.openai_embedding_deployment
    : "${var.openai_embedding_model}-${var.openai_embedding_model_version}"
  )

  openai_account_id = local.openai_existing ? var.openai_account_id : azurerm_cognitive_account.openai[0].id
  openai_endpoint   = local.openai_existing ? var.openai_endpoint : azurerm_cognitive_account.openai[0].endpoint
  # Read from the deployments Terraform creates, so the app's revision waits for them.
  openai_chat_deployment      = local.openai_existing ? var.openai_chat_deployment : azurerm_cognitive_deployment.chat[0].name
  openai_embedding_deployment = local.openai_existing ? local.openai_embedding_name : azurerm_cognitive_deployment.embeddings[0].name
}

resource "azurerm_cognitive_account" "openai" {
  count                 = local.openai_count
  name                  = local.openai_name
  location              = coalesce(var.openai_location, azurerm_resource_group.anvil.location)
  resource_group_name   = azurerm_resource_group.anvil.name
  kind                  = "OpenAI"
  sku_name              = "S0"
  custom_subdomain_name = local.openai_name
  tags                  = local.tags

  # Entra ID only: the account keys do not work, so there is no key to leak or rotate.
  local_auth_enabled = false

  # As for the index's storage: with private_network, the app reaches the account through its
  # private endpoint (network.tf), and the public endpoint is off unless index_upload_ip_ranges
  # names where index builds run (a machine running azd outside the network embeds the passages
  # there); then only those addresses pass. Without it, Container Apps have no fixed outbound
  # address to allow, so the public endpoint stays open and an Entra ID token with an OpenAI role
  # is what gets in.
  public_network_access_enabled = !var.private_network || length(var.index_upload_ip_ranges) > 0

  network_acls {
    default_action = var.private_network ? "Deny" : "Allow"
    ip_rules       = var.private_network ? var.index_upload_ip_ranges : []
    bypass         = "AzureServices"
  }

  # Chat completions and embeddings call nothing outside the service: no outbound destination is
  # allowed, so a prompt cannot make the account fetch or send anything.
  outbound_network_access_restricted = true
  fqdns                              = []
}

# Capacity is thousands of tokens per minute, from the subscription's quota for the model, SKU
# and region. No automatic model upgrades: the version is the variable's until it is changed.
resource "azurerm_cognitive_deployment" "chat" {
  count                  = local.openai_count
  name                   = var.openai_chat_deployment
  cognitive_account_id   = azurerm_cognitive_account.openai[0].id
  version_upgrade_option = "NoAutoUpgrade"

  model {
    format  = "OpenAI"
    name    = var.openai_chat_model
    version = var.openai_chat_model_version
  }

  sku {
    name     = var.openai_chat_sku
    capacity = var.openai_chat_capacity
  }

  # An account takes one deployment change at a time. This way round, because Terraform gives
  # the dependencies of a create_before_destroy resource that behaviour too, and a chat deployment
  # replaced under its same name cannot be made before the old one goes.
  depends_on = [azurerm_cognitive_deployment.embeddings]
}

# Changing the embeddings model (or its version) changes the vectors, and by default the name: a
# new deployment, made before the old one goes, so the running revision keeps embedding questions
# until the new one replaces it; the new revision serves the index azd's hook (or the index
# workflow) rebuilds with the new deployment.
resource "azurerm_cognitive_deployment" "embeddings" {
  count                  = local.openai_count
  name                   = local.openai_embedding_name
  cognitive_account_id   = azurerm_cognitive_account.openai[0].id
  version_upgrade_option = "NoAutoUpgrade"

  model {
    format  = "OpenAI"
    name    = var.openai_embedding_model
    version = var.openai_embedding_model_version
  }

  sku {
    name     = var.openai_embedding_sku
    capacity = var.openai_embedding_capacity
  }

  lifecycle {
    create_before_destroy = true
  }
}

# Anvil's identity calls the deployments (chat completions and embeddings), and does nothing else
# with the account: it cannot list keys, change deployments or read other resources.
resource "azurerm_role_assignment" "openai_user" {
  scope                = local.openai_account_id
  role_definition_name = "Cognitive Services OpenAI User"
  principal_id         = azurerm_user_assigned_identity.anvil.principal_id
  principal_type       = "ServicePrincipal"
}

# Whoever runs the first provision (the person running `azd up`) embeds the index's passages in
# azd's postprovision hook, signed in as themselves. Later applies, the deployment workflow's
# among them, keep this person (ignore_changes), as for the index's writer (storage.tf). Not on an
# existing resource, where its owner grants access and the person may hold the role already.
resource "azurerm_role_assignment" "openai_provisioner" {
  count                = local.openai_count
  scope                = local.openai_account_id
  role_definition_name = "Cognitive Services OpenAI User"
  principal_id         = data.azurerm_client_config.current.object_id

  lifecycle {
    ignore_changes = [principal_id]
  }
}
