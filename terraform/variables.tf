# Inputs. azd fills the first ones from its environment (main.tfvars.json); the deployment
# workflow passes the same ones as TF_VAR_* variables. Everything else has a default.

variable "environment_name" {
  description = "Name of the deployment (azd's AZURE_ENV_NAME), e.g. `anvil-prod`: names the resource group `rg-<name>` and tags it for azd."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$", var.environment_name))
    error_message = "environment_name must be 1 to 63 letters, digits, hyphens or underscores (set AZURE_ENV_NAME)."
  }
}

variable "location" {
  description = "Azure region for every resource, e.g. `swedencentral`."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]+$", var.location))
    error_message = "location must be a region name such as swedencentral (set AZURE_LOCATION)."
  }
}

variable "name_prefix" {
  description = "Starts every resource name; the Container App is named exactly this. Globally unique names (Cosmos DB, API Management, the registry) get a short suffix derived from the subscription and environment."
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
  description = "Container image to run, e.g. `<registry>.azurecr.io/anvil:<commit>`. Empty (azd's first provision, before any image exists): a public placeholder image until `azd deploy` or the deployment workflow sets the real one."
  type        = string
  default     = ""
}

variable "apim_publisher_email" {
  description = "Publisher e-mail of the API Management instance; Azure sends service notices there."
  type        = string

  validation {
    condition     = can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", var.apim_publisher_email))
    error_message = "apim_publisher_email must be an e-mail address (azd: azd env set APIM_PUBLISHER_EMAIL you@example.com)."
  }
}

variable "apim_publisher_name" {
  description = "Publisher (organisation) name of the API Management instance."
  type        = string
  default     = "Anvil operators"
}

variable "apim_sku_name" {
  description = "API Management tier and units: `BasicV2_<n>` or `StandardV2_<n>`. Both run `validate-azure-ad-token`, `rate-limit-by-key` and `quota-by-key` with an SLA; only StandardV2 joins a virtual network (private_network)."
  type        = string
  default     = "BasicV2_1"

  validation {
    condition     = can(regex("^(BasicV2|StandardV2)_([1-9]|10)$", var.apim_sku_name))
    error_message = "apim_sku_name must be BasicV2_1..BasicV2_10 or StandardV2_1..StandardV2_10."
  }
}

variable "custom_domain_host_name" {
  description = "Host name clients use, e.g. `anvil.contoso.example`, served by API Management with a certificate from Key Vault. Empty: the gateway's own `*.azure-api.net` host. Only a custom domain can be an Application ID URI of the app registration, which VS Code's sign-in needs as the resource (docs/deployment.md)."
  type        = string
  default     = ""

  validation {
    condition     = var.custom_domain_host_name == "" || can(regex("^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z]{2,63}$", var.custom_domain_host_name))
    error_message = "custom_domain_host_name must be a lowercase DNS name without scheme or path, or empty."
  }
}

variable "custom_domain_key_vault_id" {
  description = "Resource id of the Key Vault (Azure RBAC mode) holding the custom domain's certificate; API Management's identity is granted Key Vault Secrets User on it."
  type        = string
  default     = ""
}

variable "custom_domain_certificate_secret_id" {
  description = "Versionless secret id of the certificate, e.g. `https://<vault>.vault.azure.net/secrets/<name>`; API Management picks up renewals itself."
  type        = string
  default     = ""

  validation {
    condition     = var.custom_domain_certificate_secret_id == "" || can(regex("^https://[^/]+/secrets/[^/]+$", var.custom_domain_certificate_secret_id))
    error_message = "custom_domain_certificate_secret_id must be a versionless https://<vault>.vault.azure.net/secrets/<name> id, or empty."
  }
}

variable "client_application_ids" {
  description = "Client applications (besides VS Code and the Azure CLI, always allowed) whose tokens the gateway accepts and which may request the scope without a consent prompt."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for id in var.client_application_ids : can(regex("^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", id))])
    error_message = "client_application_ids must list lowercase client id GUIDs."
  }
}

variable "rate_limit_calls" {
  description = "Calls one user (token `oid`) may make per rate_limit_period_seconds at the gateway before 429."
  type        = number
  default     = 60
}

variable "rate_limit_period_seconds" {
  description = "Window of the per-user rate limit."
  type        = number
  default     = 60
}

variable "quota_calls" {
  description = "Calls one user (token `oid`) may make per quota_period_seconds at the gateway before 403."
  type        = number
  default     = 5000
}

variable "quota_period_seconds" {
  description = "Window of the per-user quota (86400: a day)."
  type        = number
  default     = 86400
}

variable "min_replicas" {
  description = "Fewest replicas the Container App runs. 1 (recommended for interactive use, e.g. VS Code) keeps a replica warm; 0 scales to zero when idle and costs a cold start of several seconds on the next request."
  type        = number
  default     = 1

  validation {
    condition     = var.min_replicas >= 0 && var.min_replicas <= 30
    error_message = "min_replicas must be between 0 and 30."
  }
}

variable "max_replicas" {
  description = "Most replicas the Container App scales out to."
  type        = number
  default     = 5

  validation {
    condition     = var.max_replicas >= 1 && var.max_replicas <= 30
    error_message = "max_replicas must be between 1 and 30."
  }
}

variable "scale_concurrent_requests" {
  description = "Concurrent requests per replica at which the HTTP scale rule adds a replica."
  type        = number
  default     = 50

  validation {
    condition     = var.scale_concurrent_requests >= 1
    error_message = "scale_concurrent_requests must be at least 1."
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

variable "gateway_outbound_ip_ranges" {
  description = "Extra addresses (CIDR) allowed into the Container App besides the gateway's public addresses, e.g. an outbound address the gateway was seen to use. Ignored with private_network."
  type        = list(string)
  default     = []
}

variable "private_network" {
  description = "Opt-in private network: an internal Container Apps environment in a virtual network, API Management (StandardV2) integrated with it, and Cosmos DB and the knowledge index's storage behind private endpoints with public access off. Switching an existing deployment re-creates the environment and the app."
  type        = bool
  default     = false
}

variable "index_upload_ip_ranges" {
  description = "With private_network: public IPv4 addresses, or ranges of /30 and wider (Azure Storage takes no /31 or /32), that may reach the knowledge index's storage account from outside the network, e.g. the machine running `azd up`, whose hook uploads the index. Empty: the storage account's public endpoint is off, and the index is uploaded from inside the network. Ignored without private_network (the endpoint is public, Entra ID only)."
  type        = list(string)
  default     = []

  validation {
    condition = alltrue([
      for address in var.index_upload_ip_ranges :
      can(regex("^([0-9]{1,3}\\.){3}[0-9]{1,3}(/([0-9]|[12][0-9]|30))?$", address))
    ])
    error_message = "index_upload_ip_ranges must list public IPv4 addresses (203.0.113.7) or ranges up to /30 (203.0.113.0/24); give a single address without /32."
  }
}

variable "vnet_address_space" {
  description = "Address space of the virtual network (private_network); it holds a /23 for Container Apps, a /27 for API Management and a /27 for private endpoints."
  type        = string
  default     = "10.40.0.0/22"
}

variable "openapi_path" {
  description = "OpenAPI 3.0 document API Management imports, written by `anvil openapi --openapi-version 3.0`; relative to this directory."
  type        = string
  default     = "openapi.json"
}

variable "log_retention_days" {
  description = "Days Log Analytics keeps Anvil's logs."
  type        = number
  default     = 30
}

variable "github_repository" {
  description = "GitHub repository (`owner/name`) whose deployment workflow may sign in to Azure with OIDC. Empty: no deployment identity is created."
  type        = string
  default     = ""

  validation {
    condition     = var.github_repository == "" || can(regex("^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", var.github_repository))
    error_message = "github_repository must be owner/name, or empty."
  }
}

variable "github_environment" {
  description = "GitHub environment the deployment job runs in (the federated credential's subject). Empty: the branch in github_branch instead."
  type        = string
  default     = "production"
}

variable "github_branch" {
  description = "Branch whose workflow runs may deploy when github_environment is empty."
  type        = string
  default     = "main"
}

variable "terraform_state_storage_account_id" {
  description = "Resource id of the storage account holding the Terraform state; the deployment identity gets Storage Blob Data Contributor (and Reader) on it. Empty: grant it yourself."
  type        = string
  default     = ""
}

# --- Azure OpenAI (openai.tf) -----------------------------------------------------------------

variable "openai_account_id" {
  description = "Resource id of an existing Azure OpenAI resource (kind OpenAI) to answer and embed with instead of creating one; its deployments are named by openai_chat_deployment and openai_embedding_deployment, and its endpoint is openai_endpoint. Empty: one is created, with both deployments."
  type        = string
  default     = ""

  validation {
    condition     = var.openai_account_id == "" || can(regex("(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\\.CognitiveServices/accounts/[^/]+$", var.openai_account_id))
    error_message = "openai_account_id must be the resource id of a Microsoft.CognitiveServices account: /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.CognitiveServices/accounts/NAME."
  }
}

variable "openai_endpoint" {
  description = "With openai_account_id: that resource's endpoint, e.g. `https://NAME.openai.azure.com/` (`az cognitiveservices account show --query properties.endpoint`). Empty without it: the created resource's endpoint is used."
  type        = string
  default     = ""

  validation {
    condition     = (var.openai_endpoint == "") == (var.openai_account_id == "")
    error_message = "openai_endpoint and openai_account_id go together: give the existing resource's endpoint with its id, or neither to create one."
  }

  validation {
    condition     = var.openai_endpoint == "" || can(regex("^https://[^/]+/?$", var.openai_endpoint))
    error_message = "openai_endpoint must be the resource's https:// endpoint, e.g. https://NAME.openai.azure.com/."
  }
}

variable "openai_location" {
  description = "Region of the Azure OpenAI resource Terraform creates, where its models and their quota are (not every region offers every model), e.g. `swedencentral`. Empty: the deployment's location."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^[a-z0-9]*$", var.openai_location))
    error_message = "openai_location must be a region name such as swedencentral, or empty."
  }
}

variable "openai_chat_deployment" {
  description = "Name of the chat model deployment Anvil answers with: the one Terraform creates, or the existing one in openai_account_id."
  type        = string
  default     = "chat"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{1,63}$", var.openai_chat_deployment))
    error_message = "openai_chat_deployment must be 2 to 64 letters, digits, dots, hyphens or underscores, starting with a letter or digit."
  }
}

variable "openai_chat_model" {
  description = "The chat model to deploy."
  type        = string
  default     = "gpt-4o-mini"
}

variable "openai_chat_model_version" {
  description = "The chat model's version."
  type        = string
  default     = "2024-07-18"
}

variable "openai_chat_sku" {
  description = "The chat deployment's type: GlobalStandard (pay per token, routed across regions), Standard (in the resource's region), or a provisioned type."
  type        = string
  default     = "GlobalStandard"
}

variable "openai_chat_capacity" {
  description = "The chat deployment's rate limit, in thousands of tokens per minute (from the subscription's quota)."
  type        = number
  default     = 10

  validation {
    condition     = var.openai_chat_capacity >= 1
    error_message = "openai_chat_capacity must be at least 1 (thousand tokens per minute)."
  }
}

variable "openai_embedding_deployment" {
  description = "Name of the embeddings model deployment passages and questions are embedded with: the existing one in openai_account_id (required there), or the one Terraform creates. Empty: `<model>-<version>`, e.g. `text-embedding-3-small-1`. An index records this name as its embedder, so a new model must get a new name: the app then refuses an index built with the old one instead of mixing vectors of two models."
  type        = string
  default     = ""

  validation {
    condition     = var.openai_embedding_deployment != "" || var.openai_account_id == ""
    error_message = "openai_embedding_deployment must name the embeddings deployment of the existing resource of openai_account_id."
  }

  validation {
    condition     = var.openai_embedding_deployment == "" || can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{1,63}$", var.openai_embedding_deployment))
    error_message = "openai_embedding_deployment must be 2 to 64 letters, digits, dots, hyphens or underscores, starting with a letter or digit."
  }
}

variable "openai_embedding_model" {
  description = "The embeddings model to deploy."
  type        = string
  default     = "text-embedding-3-small"
}

variable "openai_embedding_model_version" {
  description = "The embeddings model's version."
  type        = string
  default     = "1"
}

variable "openai_embedding_sku" {
  description = "The embeddings deployment's type (see openai_chat_sku)."
  type        = string
  default     = "Standard"
}

variable "openai_embedding_capacity" {
  description = "The embeddings deployment's rate limit, in thousands of tokens per minute: building an index sends every passage once, so more capacity builds a large corpus sooner."
  type        = number
  default     = 30

  validation {
    condition     = var.openai_embedding_capacity >= 1
    error_message = "openai_embedding_capacity must be at least 1 (thousand tokens per minute)."
  }
}
