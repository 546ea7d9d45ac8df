terraform {
  required_version = ">= 1.9.0, < 2.0.0"

  # Exact provider versions: the offline schema check (tests/deploy) reads the same versions'
  # schemas from the npm packages @cdktf/provider-azurerm and @cdktf/provider-azuread, and a
  # provider release that renames an argument fails there rather than at apply time. Commit the
  # .terraform.lock.hcl that `terraform init` writes.
  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "4.55.0"
    }
    azuread = {
      source  = "hashicorp/azuread"
      version = "3.7.0"
    }
    random = {
      source  = "hashicorp/random"
      version = "3.7.2"
    }
  }

  # Remote state in an Azure Storage blob container, reached with Entra ID (no account key). The
  # account, container and key come from `terraform init -backend-config=...` (the deployment
  # workflow) or from provider.conf.json (azd); see docs/deployment.md.
  backend "azurerm" {
    use_azuread_auth = true
  }
}

provider "azurerm" {
  # The subscription comes from ARM_SUBSCRIPTION_ID (azd and the deployment workflow set it).
  features {
    # The index account allows no public network access in the private mode: Terraform must not
    # read its data plane (queue and static-website properties) from outside the network; the
    # container and its settings go through Resource Manager.
    storage {
      data_plane_available = false
    }
  }

  # The deployment identity holds roles on the resource group only, so Terraform must not try to
  # register resource providers on the subscription; docs/deployment.md registers them once.
  resource_provider_registrations = "none"
  # Blob access (the Terraform state) with Entra ID, matching the backend.
  storage_use_azuread = true
}

provider "azuread" {}

provider "random" {}
