variable "location" {
  description = "Azure region for every resource, e.g. `swedencentral`."
  type        = string
}

variable "name_prefix" {
  description = "Starts every resource name; the Container App is named exactly this. Globally unique names (Cosmos DB, API Management) get a short suffix derived from the subscription."
  type        = string
  default     = "anvil"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 3 to 20 lowercase letters, digits or hyphens, starting with a letter."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "image" {
  description = "Container image to run, e.g. `myregistry.azurecr.io/anvil:0.3.0` (built from the repository's Dockerfile)."
  type        = string
}

variable "container_registry" {
  description = "Azure Container Registry holding the image. When set, the app's managed identity is granted AcrPull on it and pulls with it; leave null for a public image."
  type = object({
    name                = string
    resource_group_name = string
  })
  default = null
}

variable "entra_tenant_id" {
  description = "Directory (tenant) id of Anvil's API app registration (ANVIL_ENTRA_TENANT_ID)."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", var.entra_tenant_id))
    error_message = "entra_tenant_id must be the tenant's GUID."
  }
}

variable "entra_client_id" {
  description = "Application (client) id of Anvil's API app registration (ANVIL_ENTRA_CLIENT_ID)."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", var.entra_client_id))
    error_message = "entra_client_id must be the app registration's GUID."
  }
}

variable "entra_required_scopes" {
  description = "Delegated scopes every access token must carry (ANVIL_ENTRA_REQUIRED_SCOPES)."
  type        = list(string)
  default     = ["access_as_user"]

  validation {
    condition     = length(var.entra_required_scopes) > 0 && alltrue([for s in var.entra_required_scopes : can(regex("^[\\w.:/-]{1,120}$", s))])
    error_message = "entra_required_scopes must name at least one scope, each without spaces or commas."
  }
}

variable "public_url" {
  description = "URL clients use (ANVIL_PUBLIC_URL), e.g. a custom domain on API Management. Null: the API Management gateway URL."
  type        = string
  default     = null

  validation {
    condition     = var.public_url == null || can(regex("^https://[^/?#]+$", var.public_url))
    error_message = "public_url must be https://host, without a path or a trailing slash."
  }
}

variable "max_replicas" {
  description = "Most replicas the Container App scales out to (it scales in to zero when idle)."
  type        = number
  default     = 5

  validation {
    condition     = var.max_replicas >= 1 && var.max_replicas <= 30
    error_message = "max_replicas must be between 1 and 30."
  }
}

variable "container_cpu" {
  description = "vCPUs per replica."
  type        = number
  default     = 0.5
}

variable "container_memory" {
  description = "Memory per replica; Container Apps needs 2 GiB per vCPU, e.g. 0.5 with `1Gi`."
  type        = string
  default     = "1Gi"
}

variable "apim_publisher_name" {
  description = "Publisher (organisation) name of the API Management instance."
  type        = string
}

variable "apim_publisher_email" {
  description = "Publisher e-mail of the API Management instance; Azure sends service notices there."
  type        = string
}

variable "apim_sku_name" {
  description = "API Management tier: `Consumption_0` (pay per call, no idle cost) or `Developer_1` (fixed price, no SLA)."
  type        = string
  default     = "Consumption_0"

  validation {
    condition     = contains(["Consumption_0", "Developer_1"], var.apim_sku_name)
    error_message = "apim_sku_name must be Consumption_0 or Developer_1."
  }
}

variable "openapi_path" {
  description = "OpenAPI document API Management imports, written by `anvil openapi`; relative to the directory Terraform runs in."
  type        = string
  default     = "openapi.json"
}

variable "log_retention_days" {
  description = "Days Log Analytics keeps Anvil's logs."
  type        = number
  default     = 30
}
