# The Container App running the image: HTTPS ingress to port 8000 that accepts only the gateway,
# the managed identity for Cosmos DB, the knowledge index blob, Azure OpenAI, the registry and
# Application Insights, and the replicas and scale rule the variables set.

resource "azurerm_container_app_environment" "anvil" {
  name                       = "${var.name_prefix}-env"
  location                   = azurerm_resource_group.anvil.location
  resource_group_name        = azurerm_resource_group.anvil.name
  log_analytics_workspace_id = azurerm_log_analytics_workspace.anvil.id
  tags                       = local.tags

  # private_network: the environment lives in its own subnet and has no public address at all.
  infrastructure_subnet_id       = var.private_network ? azurerm_subnet.apps[0].id : null
  internal_load_balancer_enabled = var.private_network ? true : null
}

# Lets the app's identity send telemetry to Application Insights with Entra ID authentication.
resource "azurerm_role_assignment" "telemetry_publisher" {
  scope                = azurerm_application_insights.anvil.id
  role_definition_name = "Monitoring Metrics Publisher"
  principal_id         = azurerm_user_assigned_identity.anvil.principal_id
  principal_type       = "ServicePrincipal"
}

locals {
  # Who may reach the app's ingress: the gateway and nothing else. In the private network, the
  # gateway's integration subnet; otherwise the gateway's public addresses (and any extra ranges
  # the operator lists).
  gateway_source_ranges = var.private_network ? [local.subnet_gateway] : concat(
    [for address in azurerm_api_management.anvil.public_ip_addresses : "${address}/32"],
    var.gateway_outbound_ip_ranges,
  )
}

resource "azurerm_container_app" "anvil" {
  name                         = local.app_name
  container_app_environment_id = azurerm_container_app_environment.anvil.id
  resource_group_name          = azurerm_resource_group.anvil.name
  revision_mode                = "Single"
  tags                         = merge(local.tags, { "azd-service-name" = local.service_name })

  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.anvil.id]
  }

  registry {
    server   = azurerm_container_registry.anvil.login_server
    identity = azurerm_user_assigned_identity.anvil.id
  }

  ingress {
    external_enabled = true
    target_port      = 8000
    transport        = "auto"

    traffic_weight {
      latest_revision = true
      percentage      = 100
    }

    # Only the gateway: a request that skips it (and its token check and limits) is refused.
    dynamic "ip_security_restriction" {
      for_each = local.gateway_source_ranges
      content {
        name             = "gateway-${ip_security_restriction.key}"
        description      = "API Management"
        action           = "Allow"
        ip_address_range = ip_security_restriction.value
      }
    }
  }

  template {
    # Anvil is stateless (conversations live in Cosmos DB), so any replica serves any request and
    # min_replicas = 0 is safe; 1 (the default) spares interactive clients a cold start.
    min_replicas = var.min_replicas
    max_replicas = var.max_replicas

    http_scale_rule {
      name                = "http-requests"
      concurrent_requests = tostring(var.scale_concurrent_requests)
    }

    container {
      name   = "anvil"
      image  = local.image
      cpu    = var.container_cpu
      memory = var.container_memory

      env {
        name  = "ANVIL_HOST"
        value = "0.0.0.0"
      }
      env {
        name  = "ANVIL_PORT"
        value = "8000"
      }
      # The URL clients use: it names the protected resource in the sign-in metadata and in the
      # 401 challenge, so it must be where clients connect (API Management, or its custom domain).
      env {
        name  = "ANVIL_PUBLIC_URL"
        value = local.public_url
      }
      # API Management forwards with the app's own host name in Host (Container Apps routes by
      # it); the gateway's host is listed for callers that keep it. The public URL's host is
      # accepted without being listed.
      env {
        name  = "ANVIL_ALLOWED_HOSTS"
        value = join(",", ["${local.app_fqdn}:*", "${local.gateway_host}:*"])
      }
      env {
        name  = "ANVIL_AUTH_MODE"
        value = "entra"
      }
      # Read from the app registration (entra.tf), never copied by hand.
      env {
        name  = "ANVIL_ENTRA_TENANT_ID"
        value = data.azuread_client_config.current.tenant_id
      }
      env {
        name  = "ANVIL_ENTRA_CLIENT_ID"
        value = azuread_application.anvil.client_id
      }
      env {
        name  = "ANVIL_ENTRA_REQUIRED_SCOPES"
        value = join(",", [for scope in azuread_application.anvil.api[0].oauth2_permission_scope : scope.value])
      }
      env {
        name  = "ANVIL_STORE"
        value = "cosmos"
      }
      env {
        name  = "ANVIL_COSMOS_ENDPOINT"
        value = azurerm_cosmosdb_account.anvil.endpoint
      }
      env {
        name  = "ANVIL_COSMOS_DATABASE"
        value = azurerm_cosmosdb_sql_database.anvil.name
      }
      env {
        name  = "ANVIL_COSMOS_CONTAINER"
        value = azurerm_cosmosdb_sql_container.conversations.name
      }
      # The knowledge index in Blob Storage (storage.tf), read as the identity. A new version
      # uploaded there is served within ANVIL_INDEX_REFRESH_SECONDS (60 s), with no new revision;
      # a replica does not start while the blob is missing, so it is uploaded before the real
      # image first runs (azure.yaml's postprovision hook).
      env {
        name  = "ANVIL_INDEX"
        value = local.index_url
      }
      # Answers from the Azure OpenAI chat deployment, grounded on passages ranked by words and
      # by the embeddings deployment (openai.tf), signed in as the identity: no key.
      env {
        name  = "ANVIL_ANSWER_ENGINE"
        value = "azure-openai"
      }
      env {
        name  = "ANVIL_AZURE_OPENAI_ENDPOINT"
        value = local.openai_endpoint
      }
      env {
        name  = "ANVIL_AZURE_OPENAI_DEPLOYMENT"
        value = local.openai_chat_deployment
      }
      env {
        name  = "ANVIL_EMBEDDINGS"
        value = "azure-openai"
      }
      env {
        name  = "ANVIL_AZURE_OPENAI_EMBEDDING_DEPLOYMENT"
        value = local.openai_embedding_deployment
      }
      # DefaultAzureCredential (Cosmos DB, Blob Storage, Azure OpenAI, telemetry) picks the
      # user-assigned identity with this client id.
      env {
        name  = "AZURE_CLIENT_ID"
        value = azurerm_user_assigned_identity.anvil.client_id
      }
      # Traces, metrics and logs to Application Insights, sent as the managed identity.
      env {
        name  = "APPLICATIONINSIGHTS_CONNECTION_STRING"
        value = azurerm_application_insights.anvil.connection_string
      }
      env {
        name  = "ANVIL_TELEMETRY_AAD_AUTH"
        value = "true"
      }

      # A replica downloads and opens the knowledge index before it listens; give it up to a minute.
      startup_probe {
        transport               = "HTTP"
        port                    = 8000
        path                    = "/healthz"
        interval_seconds        = 2
        timeout                 = 2
        failure_count_threshold = 30
      }

      liveness_probe {
        transport               = "HTTP"
        port                    = 8000
        path                    = "/healthz"
        interval_seconds        = 10
        timeout                 = 2
        failure_count_threshold = 3
      }

      # 503 until Cosmos DB answers and Entra's signing keys are loaded (a key fetch may take up
      # to 5 s), so a replica that cannot serve gets no traffic.
      readiness_probe {
        transport               = "HTTP"
        port                    = 8000
        path                    = "/readyz"
        interval_seconds        = 10
        timeout                 = 6
        failure_count_threshold = 3
        success_count_threshold = 1
      }
    }
  }

  lifecycle {
    # Container Apps reads an empty list of restrictions as "everyone": never deploy that.
    precondition {
      condition     = length(local.gateway_source_ranges) > 0
      error_message = "API Management reports no public address to admit; set gateway_outbound_ip_ranges, or use private_network, so the app does not accept requests that skip the gateway."
    }
  }

  # The first revision starts only once it may read Cosmos DB and the index, call Azure OpenAI,
  # pull the image and send telemetry (and, with private_network, reach the index and Azure
  # OpenAI through their private endpoints).
  depends_on = [
    azurerm_cosmosdb_sql_role_assignment.anvil_data_contributor,
    azurerm_role_assignment.index_reader,
    azurerm_private_endpoint.blob,
    azurerm_role_assignment.openai_user,
    azurerm_private_endpoint.openai,
    azurerm_role_assignment.acr_pull,
    azurerm_role_assignment.telemetry_publisher,
  ]
}
