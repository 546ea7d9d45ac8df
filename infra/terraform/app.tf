# The Container App running the image: external HTTPS ingress to port 8000, scale to zero, and
# the managed identity for Cosmos DB (and the registry, when one is given).

resource "azurerm_container_app_environment" "anvil" {
  name                       = "${var.name_prefix}-env"
  location                   = azurerm_resource_group.anvil.location
  resource_group_name        = azurerm_resource_group.anvil.name
  log_analytics_workspace_id = azurerm_log_analytics_workspace.anvil.id
  tags                       = var.tags
}

data "azurerm_container_registry" "image" {
  count               = var.container_registry == null ? 0 : 1
  name                = var.container_registry.name
  resource_group_name = var.container_registry.resource_group_name
}

resource "azurerm_role_assignment" "acr_pull" {
  count                = var.container_registry == null ? 0 : 1
  scope                = data.azurerm_container_registry.image[0].id
  role_definition_name = "AcrPull"
  principal_id         = azurerm_user_assigned_identity.anvil.principal_id
  principal_type       = "ServicePrincipal"
}

# Lets the app's identity send telemetry to Application Insights with Entra ID authentication.
resource "azurerm_role_assignment" "telemetry_publisher" {
  scope                = azurerm_application_insights.anvil.id
  role_definition_name = "Monitoring Metrics Publisher"
  principal_id         = azurerm_user_assigned_identity.anvil.principal_id
  principal_type       = "ServicePrincipal"
}

resource "azurerm_container_app" "anvil" {
  name                         = local.app_name
  container_app_environment_id = azurerm_container_app_environment.anvil.id
  resource_group_name          = azurerm_resource_group.anvil.name
  revision_mode                = "Single"
  tags                         = var.tags

  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.anvil.id]
  }

  dynamic "registry" {
    for_each = data.azurerm_container_registry.image
    content {
      server   = registry.value.login_server
      identity = azurerm_user_assigned_identity.anvil.id
    }
  }

  ingress {
    external_enabled = true
    target_port      = 8000
    transport        = "auto"

    traffic_weight {
      latest_revision = true
      percentage      = 100
    }
  }

  template {
    # Scale to zero when idle: Anvil is stateless (conversations live in Cosmos DB), so any
    # replica, or a fresh one after a cold start, serves any request.
    min_replicas = 0
    max_replicas = var.max_replicas

    http_scale_rule {
      name                = "http-requests"
      concurrent_requests = "50"
    }

    container {
      name   = "anvil"
      image  = var.image
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
        value = join(",", ["${local.app_fqdn}:*", "${local.apim_host}:*"])
      }
      env {
        name  = "ANVIL_AUTH_MODE"
        value = "entra"
      }
      env {
        name  = "ANVIL_ENTRA_TENANT_ID"
        value = var.entra_tenant_id
      }
      env {
        name  = "ANVIL_ENTRA_CLIENT_ID"
        value = var.entra_client_id
      }
      env {
        name  = "ANVIL_ENTRA_REQUIRED_SCOPES"
        value = join(",", var.entra_required_scopes)
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
      # DefaultAzureCredential picks the user-assigned identity with this client id.
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

      # A replica builds its retrieval index before it listens; give it up to a minute.
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

  # The first revision starts only once it may read Cosmos DB and pull the image.
  depends_on = [
    azurerm_cosmosdb_sql_role_assignment.anvil_data_contributor,
    azurerm_role_assignment.acr_pull,
  ]
}
