"""Every argument, nested block and attribute reference in terraform/ exists in the provider schemas.

The schemas come from the CDK for Terraform packages in package.json, at the same provider
versions terraform/versions.tf pins; see provider_schema.py.
"""

from __future__ import annotations

import json

import pytest
from deploy.provider_schema import PACKAGES, ROOT, check, check_references, schema
from deploy.terraform_config import configuration, parse, references


@pytest.fixture(scope="module", autouse=True)
def _schemas_installed() -> None:
    missing = [
        package for package in PACKAGES.values() if not (ROOT / "node_modules" / package / ".jsii").is_file()
    ]
    if missing:
        pytest.fail(f"npm packages missing ({', '.join(missing)}): run ./dev.sh test, which runs npm ci")


def test_the_schema_packages_are_the_pinned_provider_versions() -> None:
    (terraform,) = configuration()["terraform"]
    (providers,) = terraform["required_providers"]
    assert set(providers) == set(PACKAGES)
    for provider, pin in providers.items():
        assert schema(provider).version == pin["version"], (
            f"{PACKAGES[provider]} describes {provider} {schema(provider).version}; pick the package "
            f"release whose package.json `cdktf.provider.version` is {pin['version']}"
        )
    manifest = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))
    for package in PACKAGES.values():
        # Exact versions: a newer package describes a newer provider.
        assert manifest["devDependencies"][package][0].isdigit(), package


def test_every_argument_and_block_is_in_the_provider_schema() -> None:
    assert check(configuration()) == []


def test_every_attribute_a_reference_reads_is_exported() -> None:
    assert check_references(references(configuration())) == []


WRONG = """
resource "azurerm_container_app" "app" {
  name                         = "anvil"
  container_app_environment_id = "x"
  resource_group_name          = "rg"
  revison_mode                 = "Single"

  template {
    min_replica = 1
    container {
      name   = "anvil"
      image  = "anvil:1"
      cpu    = 0.5
      memory = "1Gi"
    }
  }

  ingress {
    target_port = 8000
    traffic_weight {
      percentage      = 100
      latest_revision = true
    }
    dynamic "ip_security_restriction" {
      for_each = []
      content {
        name             = "gateway"
        action           = "Allow"
        ip_adress_range  = "10.0.0.0/8"
      }
    }
  }
}

resource "azurerm_cosmosdb_sql_container" "c" {
  name                = "c"
  resource_group_name = "rg"
  account_name        = "a"
  database_name       = "d"
  partition_key_paths = ["/oid"]
  default_ttl         = 10
  indexing_policy = "consistent"
}

resource "azuread_application" "api" {
  display_name = "x"
  api {
    requested_access_token_version = 2
    oauth2_permission_scopes {
      value = "access_as_user"
    }
  }
}

resource "azurerm_container_registry" "r" {
  name                = "r"
  location            = "l"
  resource_group_name = "rg"
}

resource "azurerm_api_managment" "typo" {}

provider "azurerm" {
  feature {}
}

terraform {
  backend "azurerm" {
    use_azure_ad_auth = true
  }
}
"""


def test_the_check_finds_misspelt_arguments_blocks_and_types() -> None:
    problems = "\n".join(check(parse(WRONG)))
    for expected in (
        "resource.azurerm_container_app.app: unknown argument 'revison_mode'",
        "resource.azurerm_container_app.app.template: unknown argument 'min_replica'",
        "ingress.dynamic.ip_security_restriction: unknown argument 'ip_adress_range'",
        "resource.azurerm_cosmosdb_sql_container.c: 'indexing_policy' is a block, not an argument",
        "resource.azuread_application.api.api: unknown argument 'oauth2_permission_scopes'",
        "resource.azurerm_container_registry.r: missing required argument 'sku'",
        "resource azurerm_api_managment: not a resource of azurerm",
        "provider.azurerm: unknown argument 'feature'",
        "terraform.backend.azurerm: unknown argument 'use_azure_ad_auth'",
    ):
        assert expected in problems, f"{expected!r} not reported:\n{problems}"


def test_the_check_accepts_the_same_snippet_spelt_right() -> None:
    right = (
        WRONG.replace("revison_mode", "revision_mode")
        .replace("min_replica ", "min_replicas ")
        .replace("ip_adress_range ", "ip_address_range")
        .replace("oauth2_permission_scopes", "oauth2_permission_scope")
        .replace('indexing_policy = "consistent"', 'indexing_policy {\n    indexing_mode = "consistent"\n  }')
        .replace('resource "azurerm_api_managment" "typo" {}', "")
        .replace(
            '  resource_group_name = "rg"\n}\n\n\n',
            '  resource_group_name = "rg"\n  sku                 = "Basic"\n}\n\n',
        )
        .replace("feature {}", "features {}")
        .replace("use_azure_ad_auth", "use_azuread_auth")
    )
    problems = check(parse(right))
    # Only the scope's missing id is left: the snippet is otherwise valid.
    assert problems == [
        "resource.azuread_application.api.api.oauth2_permission_scope: missing required argument 'id' "
        "(@cdktf/provider-azuread.application.ApplicationApiOauth2PermissionScope)"
    ]


def test_the_reference_check_finds_attributes_a_resource_does_not_export() -> None:
    value = "${azurerm_api_management.a.gateway_uri} ${data.azuread_client_config.c.tenantid}"
    wrong = parse(f'output "x" {{\n  value = "{value}"\n}}\n')
    problems = check_references(references(wrong))
    assert problems == [
        "azuread_client_config.c.tenantid: azuread_client_config has no attribute 'tenantid'",
        "azurerm_api_management.a.gateway_uri: azurerm_api_management has no attribute 'gateway_uri'",
    ]
    right = parse('output "x" {\n  value = "${azurerm_api_management.a.gateway_url}"\n}\n')
    assert check_references(references(right)) == []
