"""The gateway's policies (terraform/policies/*.xml.tftpl), rendered as apim.tf renders them.

Each template is rendered with stand-in values for the Terraform expressions apim.tf passes,
parsed as XML, and its rules asserted: whose tokens are accepted (tenant, both audience forms,
the scope in `scp`, the client applications), that limits are per user (`oid`), and that a 401
from the gateway still tells VS Code where to sign in. The tests also check that apim.tf passes
each value from the resource it should come from.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from deploy.terraform_config import (
    TERRAFORM,
    blocks,
    locals_,
    render_template,
    resource,
    templatefile_call,
)

from app.http.wellknown import WELL_KNOWN

TENANT = "7f3e9c1a-2b4d-4e6f-8a0b-1c2d3e4f5a6b"
CLIENT = "c4a1e2f3-5b6d-4c7e-9f80-a1b2c3d4e5f6"
GATEWAY = "https://anvil-1a2b3c.azure-api.net"
VSCODE = "aebc6443-996d-45c2-90f0-388ff96faa56"
AZURE_CLI = "04b07795-8ddb-461a-bbee-02f9e1bf7b46"

# Stand-ins for the expressions apim.tf passes, as Azure would fill them in.
STAND_INS: dict[str, Any] = {
    "data.azuread_client_config.current.tenant_id": TENANT,
    "azuread_application.anvil.client_id": CLIENT,
    "local.scope_name": "access_as_user",
    "local.client_application_ids": [VSCODE, AZURE_CLI],
    '"${local.public_url}/.well-known/oauth-protected-resource/mcp"': f"{GATEWAY}{WELL_KNOWN}/mcp",
    "var.rate_limit_calls": 60,
    "var.rate_limit_period_seconds": 60,
    "var.quota_calls": 5000,
    "var.quota_period_seconds": 86400,
}


def rendered(resource_type: str, name: str | None = None) -> tuple[ET.Element, dict[str, str]]:
    """The policy XML of a resource, rendered, and the expressions passed to its template."""
    body = resource(resource_type, name)
    path, arguments = templatefile_call(body["xml_content"])
    assert path.startswith("policies/"), path
    missing = sorted(set(arguments.values()) - set(STAND_INS))
    assert not missing, f"add stand-ins for {missing}"
    values = {key: STAND_INS[expression] for key, expression in arguments.items()}
    text = render_template((TERRAFORM / path).read_text(encoding="utf-8"), values)
    return ET.fromstring(text), arguments


@pytest.fixture(scope="module")
def api_policy() -> tuple[ET.Element, dict[str, str]]:
    return rendered("azurerm_api_management_api_policy")


def section(policy: ET.Element, name: str) -> ET.Element:
    found = policy.find(name)
    assert found is not None, f"no <{name}>"
    return found


def token_check(policy: ET.Element) -> ET.Element:
    (check,) = policy.iter("validate-azure-ad-token")
    return check


def test_every_section_is_there_and_inherits(api_policy: tuple[ET.Element, dict[str, str]]) -> None:
    policy, _ = api_policy
    assert policy.tag == "policies"
    assert [child.tag for child in policy] == ["inbound", "backend", "outbound", "on-error"]
    for child in policy:
        assert child[0].tag == "base", f"<{child.tag}> must start with <base />"


def test_tokens_must_be_for_anvils_api_in_the_tenant(api_policy: tuple[ET.Element, dict[str, str]]) -> None:
    policy, arguments = api_policy
    check = token_check(policy)
    assert check.get("tenant-id") == TENANT
    assert arguments["tenant_id"] == "data.azuread_client_config.current.tenant_id"
    assert check.get("header-name") == "Authorization"
    assert check.get("failed-validation-httpcode") == "401"
    # v2 tokens carry the client id as `aud`, v1 tokens the api:// URI: both forms.
    audiences = [audience.text for audience in check.iterfind("audiences/audience")]
    assert sorted(audiences) == sorted([f"api://{CLIENT}", CLIENT])
    assert arguments["client_id"] == "azuread_application.anvil.client_id"


def test_tokens_must_carry_the_scope(api_policy: tuple[ET.Element, dict[str, str]]) -> None:
    policy, arguments = api_policy
    (claim,) = token_check(policy).iterfind("required-claims/claim")
    assert claim.get("name") == "scp"
    assert claim.get("match") == "any"
    assert claim.get("separator") == " "
    assert [value.text for value in claim.iterfind("value")] == ["access_as_user"]
    # The same scope the app registration exposes and Anvil requires.
    assert arguments["scope"] == "local.scope_name"
    assert locals_()["scope_name"] == "access_as_user"
    scope = resource("azuread_application")["api"][0]["oauth2_permission_scope"][0]
    assert scope["value"] == "${local.scope_name}"


def test_only_allowed_client_applications(api_policy: tuple[ET.Element, dict[str, str]]) -> None:
    policy, arguments = api_policy
    ids = [app.text for app in token_check(policy).iterfind("client-application-ids/application-id")]
    assert ids == [VSCODE, AZURE_CLI]
    assert arguments["client_application_ids"] == "local.client_application_ids"
    listed = locals_()["client_application_ids"]
    assert "local.vscode_client_id" in listed and "local.azure_cli_client_id" in listed
    assert "var.client_application_ids" in listed
    assert (locals_()["vscode_client_id"], locals_()["azure_cli_client_id"]) == (VSCODE, AZURE_CLI)


def counter_keys(policy: ET.Element, tag: str) -> list[str]:
    return [element.get("counter-key", "") for element in policy.iter(tag)]


def test_limits_are_per_user_by_the_tokens_oid(api_policy: tuple[ET.Element, dict[str, str]]) -> None:
    policy, arguments = api_policy
    variable = token_check(policy).get("output-token-variable-name")
    assert variable
    inbound = [child.tag for child in section(policy, "inbound")]
    for tag in ("rate-limit-by-key", "quota-by-key"):
        (key,) = counter_keys(policy, tag)
        token = rf'context\.Variables\.GetValueOrDefault<Jwt>\("{variable}"\)'
        assert re.fullmatch(rf'@\({token}\.Claims\.GetValueOrDefault\("oid", ""\)\)', key), key
        # The token is checked first, so the claim a limit is keyed on is one Entra signed.
        assert inbound.index("validate-azure-ad-token") < inbound.index(tag)
    (rate,) = policy.iter("rate-limit-by-key")
    (quota,) = policy.iter("quota-by-key")
    assert (rate.get("calls"), rate.get("renewal-period")) == ("60", "60")
    assert (quota.get("calls"), quota.get("renewal-period")) == ("5000", "86400")
    assert arguments["rate_limit_calls"] == "var.rate_limit_calls"
    assert arguments["quota_calls"] == "var.quota_calls"


def test_a_401_from_the_gateway_carries_the_sign_in_challenge(
    api_policy: tuple[ET.Element, dict[str, str]],
) -> None:
    policy, arguments = api_policy
    on_error = section(policy, "on-error")
    responses = list(on_error.iter("return-response"))
    assert responses, "on-error answers nothing of its own"
    expected = f'Bearer resource_metadata="{GATEWAY}{WELL_KNOWN}/mcp"'
    for response in responses:
        status = response.find("set-status")
        assert status is not None and status.get("code") == "401"
        (challenge,) = [h for h in response.iter("set-header") if h.get("name") == "WWW-Authenticate"]
        value = challenge.findtext("value", "")
        assert value == expected or value.startswith(expected + ", "), value
    # Every branch answers failures of the token check, and only those.
    for when in on_error.iter("when"):
        assert 'context.LastError.Source == "validate-azure-ad-token"' in when.get("condition", "")
    assert (
        arguments["resource_metadata_url"] == '"${local.public_url}/.well-known/oauth-protected-resource/mcp"'
    )
    assert WELL_KNOWN == "/.well-known/oauth-protected-resource"


def test_the_sign_in_metadata_is_anonymous_and_limited_per_address() -> None:
    operations = resource("azurerm_api_management_api_operation_policy")
    assert operations["for_each"] == "${toset(local.anonymous_operations)}"
    ids = {
        operation["operationId"]
        for path, methods in locals_()["openapi_unlisted_paths"].items()
        if path.startswith(WELL_KNOWN)
        for operation in methods.values()
    }
    assert set(locals_()["anonymous_operations"]) == ids
    body = resource("azurerm_api_management_api_operation_policy")
    path, arguments = templatefile_call(body["xml_content"])
    values = {key: STAND_INS[expression] for key, expression in arguments.items()}
    policy = ET.fromstring(render_template((TERRAFORM / path).read_text(encoding="utf-8"), values))
    inbound = section(policy, "inbound")
    # No <base /> in inbound: the API's token check does not run for these two operations.
    assert inbound.find("base") is None
    assert not list(policy.iter("validate-azure-ad-token"))
    assert counter_keys(policy, "rate-limit-by-key") == ["@(context.Request.IpAddress)"]


def test_no_other_policy_resource_weakens_the_api_policy() -> None:
    assert set(blocks("resource", "azurerm_api_management_api_operation_policy")) == {"anonymous"}
    assert not blocks("resource", "azurerm_api_management_policy")
    assert not blocks("resource", "azurerm_api_management_product_policy")


def test_the_renderer_refuses_what_templatefile_would_render_differently() -> None:
    with pytest.raises(KeyError, match="missing"):
        render_template("<a>${missing}</a>", {})
    with pytest.raises(ValueError, match="directive"):
        render_template("%{ if x ~}\n<a/>\n%{ endif ~}\n", {"x": True})
    with pytest.raises(ValueError, match="plain"):
        render_template("<a>${upper(x)}</a>", {"x": "y"})
    looped = render_template(
        "<l>\n%{ for id in ids ~}\n  <i>${id}</i>\n%{ endfor ~}\n</l>", {"ids": ["a", "b"]}
    )
    assert looped == "<l>\n  <i>a</i>\n  <i>b</i>\n</l>"
