terraform {
  required_version = ">= 1.6.0, < 2.0.0"

  required_providers {
    azurerm = {
      source = "hashicorp/azurerm"
      # 4.x: `partition_key_paths` on Cosmos DB containers, probes and registry identities on
      # Container Apps. Commit the .terraform.lock.hcl that `terraform init` writes.
      version = "~> 4.20"
    }
  }
}

provider "azurerm" {
  # The subscription comes from ARM_SUBSCRIPTION_ID (see docs/deployment.md).
  features {}
}
