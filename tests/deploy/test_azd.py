"""`azd up` (azure.yaml, terraform/main.tfvars.json, terraform/provider.conf.json) and the GitHub
deployment workflow agree with the Terraform and with each other.

azd and the workflow must hand Terraform the same variables from the same names, and keep the
state in the same place, or one would undo what the other applied. The preprovision hook is run
for real: it must write the OpenAPI 3.0 document the gateway imports, and never a broken one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy.provider_schema import backend_struct, camel
from deploy.terraform_config import ROOT, TERRAFORM, configuration, locals_
from openapi_spec_validator import validate

from app.main import create_app
from app.settings import Settings

WORKFLOW = ROOT / ".github" / "workflows" / "deploy.yml"
SUBSTITUTION = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")


@cache
def project() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "azure.yaml").read_text(encoding="utf-8")))


@cache
def workflow() -> dict[str, Any]:
    return dict(yaml.safe_load(WORKFLOW.read_text(encoding="utf-8")))


def tfvars() -> dict[str, str]:
    return dict(json.loads((TERRAFORM / "main.tfvars.json").read_text(encoding="utf-8")))


def variables() -> dict[str, dict[str, Any]]:
    return {name: body for block in configuration()["variable"] for name, body in block.items()}


def test_azd_provisions_with_the_terraform_in_terraform() -> None:
    infra = project()["infra"]
    assert infra == {"provider": "terraform", "path": "terraform"}
    assert list((ROOT / infra["path"]).glob("*.tf"))


def test_the_service_is_the_tagged_container_app_built_from_the_dockerfile() -> None:
    (name, service), *others = project()["services"].items()
    assert not others
    # azd finds the Container App by its azd-service-name tag (terraform/app.tf).
    assert name == locals_()["service_name"]
    assert service["host"] == "containerapp"
    assert service["language"] == "docker"
    assert (ROOT / service["project"] / service["docker"]["path"]).is_file()
    # Built by the registry, so `azd up` needs no Docker engine.
    assert service["docker"]["remoteBuild"] is True


def test_the_variable_file_sets_every_required_variable_from_azds_environment() -> None:
    values = tfvars()
    declared = variables()
    assert set(values) <= set(declared), sorted(set(values) - set(declared))
    required = {name for name, body in declared.items() if "default" not in body}
    assert required <= set(values), f"azd would stop at a prompt for {sorted(required - set(values))}"
    for name, value in values.items():
        assert SUBSTITUTION.fullmatch(value), f"{name}: {value!r} is not one ${{NAME}} substitution"
        # azd passes its environment to hooks, where Anvil refuses unknown ANVIL_* variables.
        assert not value.startswith("${ANVIL_"), name
    assert values["environment_name"] == "${AZURE_ENV_NAME}"
    assert values["location"] == "${AZURE_LOCATION}"
    # What azd deployed last (empty on the first provision, when the placeholder runs).
    assert values["image"] == "${SERVICE_ANVIL_IMAGE_NAME}"
    assert variables()["image"]["default"] == ""


def test_azds_backend_settings_complete_the_partial_backend_block() -> None:
    settings = json.loads((TERRAFORM / "provider.conf.json").read_text(encoding="utf-8"))
    (terraform,) = configuration()["terraform"]
    (backend,) = terraform["backend"]
    given = {camel(name) for name in {**backend["azurerm"], **settings}}
    struct = backend_struct("azurerm")
    assert given <= set(struct.properties), sorted(given - set(struct.properties))
    assert struct.required <= given, sorted(struct.required - given)
    assert settings["key"] == "${AZURE_ENV_NAME}.tfstate"


def job() -> dict[str, Any]:
    (only,) = workflow()["jobs"].values()
    return dict(only)


def steps() -> list[dict[str, Any]]:
    return list(job()["steps"])


def run_of(needle: str) -> dict[str, Any]:
    found = [step for step in steps() if needle in step.get("run", "")]
    assert len(found) == 1, f"expected one step running {needle!r}"
    return found[0]


def test_the_workflow_signs_in_with_oidc_from_repository_variables() -> None:
    assert workflow()["permissions"] == {"contents": "read", "id-token": "write"}
    (login,) = [step for step in steps() if step.get("uses", "").startswith("azure/login@")]
    assert login["with"] == {
        "client-id": "${{ vars.AZURE_CLIENT_ID }}",
        "tenant-id": "${{ vars.AZURE_TENANT_ID }}",
        "subscription-id": "${{ vars.AZURE_SUBSCRIPTION_ID }}",
    }
    env = job()["env"]
    assert env["ARM_USE_OIDC"] == "true"
    assert env["ARM_CLIENT_ID"] == login["with"]["client-id"]
    # The federated credential trusts this environment's jobs (terraform/github.tf).
    assert job()["environment"] == variables()["github_environment"]["default"]


def test_every_action_is_pinned_by_commit() -> None:
    used = [step["uses"] for step in steps() if "uses" in step]
    assert used
    for action in used:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), (
            f"{action} is not pinned by a full commit SHA"
        )


def test_the_image_is_built_in_the_registry_and_tagged_with_the_commit() -> None:
    build = run_of("az acr build")["run"]
    assert '--image "anvil:$GITHUB_SHA"' in build
    assert '--registry "$REGISTRY"' in build
    # The image's OCI labels name the commit and the repository it was built from (Dockerfile ARGs).
    assert '--build-arg "REVISION=$GITHUB_SHA"' in build
    assert '--build-arg "SOURCE=$GITHUB_SERVER_URL/$GITHUB_REPOSITORY"' in build
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ARG REVISION=""' in dockerfile and 'ARG SOURCE=""' in dockerfile
    apply = run_of("terraform apply")["run"]
    assert '-var "image=$REGISTRY.azurecr.io/anvil:$GITHUB_SHA"' in apply
    assert job()["env"]["REGISTRY"] == "${{ vars.AZURE_CONTAINER_REGISTRY_NAME }}"
    # The output azd and docs/deployment.md give for that repository variable.
    assert "AZURE_CONTAINER_REGISTRY_NAME" in {name for block in configuration()["output"] for name in block}


def test_the_workflow_uses_azds_state_and_variables() -> None:
    init = run_of("terraform init")
    settings = json.loads((TERRAFORM / "provider.conf.json").read_text(encoding="utf-8"))
    configured = dict(re.findall(r'-backend-config="(\w+)=([^"]*)"', init["run"]))
    assert set(configured) == set(settings)
    for name, value in settings.items():
        # provider.conf.json's ${NAME} is the step's $NAME, read from the repository variable NAME.
        names = SUBSTITUTION.findall(value)
        assert configured[name] == SUBSTITUTION.sub(r"$\1", value)
        for env_name in names:
            assert init["env"][env_name] == f"${{{{ vars.{env_name} }}}}"
    env = job()["env"]
    passed = {
        name.removeprefix("TF_VAR_"): value for name, value in env.items() if name.startswith("TF_VAR_")
    }
    expected = {name: value for name, value in tfvars().items() if name != "image"}
    assert set(passed) == set(expected), "the workflow and azd must pass the same variables"
    for name, value in expected.items():
        (source,) = SUBSTITUTION.findall(value)
        # In Actions, GITHUB_REPOSITORY is the running repository; the rest are repository variables.
        want = "${{ github.repository }}" if source == "GITHUB_REPOSITORY" else f"${{{{ vars.{source} }}}}"
        assert passed[name] == want, name


def test_the_workflow_terraform_satisfies_the_required_version() -> None:
    (setup,) = [step for step in steps() if step.get("uses", "").startswith("hashicorp/setup-terraform@")]
    version = tuple(int(part) for part in str(setup["with"]["terraform_version"]).split("."))
    (terraform,) = configuration()["terraform"]
    low, high = re.fullmatch(r">= ([\d.]+), < ([\d.]+)", terraform["required_version"]).groups()  # type: ignore[union-attr]
    assert tuple(map(int, low.split("."))) <= version < tuple(map(int, high.split(".")))
    assert setup["with"]["terraform_wrapper"] is False


def hook(shell: str) -> dict[str, Any]:
    return dict(project()["hooks"]["preprovision"][shell])


def test_the_preprovision_hook_writes_the_openapi_document_on_both_shells() -> None:
    for shell, interpreter in (("posix", "sh"), ("windows", "pwsh")):
        found = hook(shell)
        assert found["shell"] == interpreter
        assert found["continueOnError"] is False
        assert "openapi --openapi-version 3.0" in found["run"]
        assert "terraform/openapi.json" in found["run"]


def run_posix_hook(
    directory: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The posix hook, as azd runs it from the project root, with this checkout's `anvil`."""
    (directory / "terraform").mkdir(exist_ok=True)
    (directory / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    anvil = directory / ".venv" / "bin" / "anvil"
    if not anvil.exists():
        anvil.symlink_to(Path(sys.executable).with_name("anvil"))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(directory), **(extra_env or {})}
    return subprocess.run(
        ["sh", "-c", hook("posix")["run"]], cwd=directory, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_posix_hook_generates_an_openapi_303_document(tmp_path: Path) -> None:
    ran = run_posix_hook(tmp_path)
    assert ran.returncode == 0, ran.stderr
    document = json.loads((tmp_path / "terraform" / "openapi.json").read_text(encoding="utf-8"))
    assert document["openapi"] == "3.0.3"
    validate(document)
    app_paths = create_app(Settings(auth_mode="none", store="memory", answer_engine="echo")).openapi()[
        "paths"
    ]
    assert set(document["paths"]) == set(app_paths)
    assert not (tmp_path / "terraform" / "openapi.json.tmp").exists()


def test_a_failing_hook_stops_azd_and_keeps_the_previous_document(tmp_path: Path) -> None:
    previous = tmp_path / "terraform" / "openapi.json"
    previous.parent.mkdir()
    previous.write_text('{"openapi": "3.0.3"}\n', encoding="utf-8")
    # Anvil refuses a misspelt setting, as it would in a misconfigured azd environment.
    ran = run_posix_hook(tmp_path, {"ANVIL_AUTH_MOD": "entra"})
    assert ran.returncode != 0
    assert previous.read_text(encoding="utf-8") == '{"openapi": "3.0.3"}\n'


@pytest.mark.skipif(os.name != "posix", reason="the posix hook")
def test_the_hook_finds_anvil_on_the_path_without_a_project_venv(tmp_path: Path) -> None:
    (tmp_path / "terraform").mkdir()
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = subprocess.run(
        ["sh", "-c", hook("posix")["run"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert (
        json.loads((tmp_path / "terraform" / "openapi.json").read_text(encoding="utf-8"))["openapi"]
        == "3.0.3"
    )
