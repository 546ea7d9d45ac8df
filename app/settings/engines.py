"""The answer engine: which one, its corpus, and the language model it calls (`EngineSettings`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator

from app.settings.base import Part
from app.urls import checked_url

#: The site styles of `ANVIL_CORPUS_SITE_STYLE` (`app.knowledge.sites.STYLES`).
SiteStyleName = Literal["sphinx", "sphinx-dirhtml", "mkdocs", "docusaurus", "vitepress", "github", "html"]

#: What the bundled docs are called, and what they cover.
BUNDLED_NAME = "Anvil's documentation"
BUNDLED_DESCRIPTION = (
    "how to run, configure, sign in to, deploy and use Anvil, the MCP service that answers "
    "questions from documents and keeps conversation history"
)


class EngineSettings(Part):
    """The answer engine, the corpus it answers from, and the model endpoint of `openai` and
    `azure-openai`."""

    answer_engine: Literal["retrieval", "openai", "azure-openai", "echo"] = Field(
        "retrieval",
        description=(
            "`retrieval`: cited answers composed from the Markdown corpus, offline; `openai`: a language "
            "model behind any OpenAI-compatible Chat Completions endpoint, grounded on the corpus; "
            "`azure-openai`: the same with an Azure OpenAI deployment; `echo`: repeats the question."
        ),
    )
    corpus_dir: Path | None = Field(
        None,
        description=(
            "Folder of documents (Markdown, MDX, reStructuredText, HTML, text) every engine but echo "
            "answers from. Default: the project's `docs/`."
        ),
    )
    knowledge_name: str | None = Field(
        None,
        max_length=120,
        description=(
            "What the knowledge answered from is called, in the tools' descriptions, the server's "
            "instructions and `/readyz` (e.g. `the Contoso engineering handbook`). Default: the name "
            "`anvil index --name` stored in `ANVIL_INDEX`, else `Anvil's documentation` for the "
            "bundled docs, else the corpus folder's name."
        ),
    )
    knowledge_description: str | None = Field(
        None,
        max_length=500,
        description=(
            "What the knowledge covers, in one sentence, shown beside its name so that an agent "
            "knows when to ask. Default: the description `anvil index --description` stored, if any."
        ),
    )
    corpus_site: str | None = Field(
        None,
        description=(
            "The site `ANVIL_CORPUS_DIR`'s pages are published at, e.g. `https://docs.example.com`: "
            "each cited passage then carries a `url` to its page and heading."
        ),
    )
    corpus_site_style: SiteStyleName | None = Field(
        None,
        description=(
            "The generator of `ANVIL_CORPUS_SITE`, so that each `url` opens the right page and "
            "section: `sphinx`, `sphinx-dirhtml`, `mkdocs`, `docusaurus`, `vitepress`, `github` or "
            "`html` (as `anvil index --site-style`). Default: sniffed from the folder (a `conf.py` is "
            "Sphinx's, a `mkdocs.yml` MkDocs', ...), else each document by its type."
        ),
    )
    max_document_bytes: int = Field(
        8 << 20,
        ge=1024,
        le=1 << 30,
        description=(
            "Largest document read from `ANVIL_CORPUS_DIR` (or by `anvil index`), in bytes; a larger "
            "one is skipped with a warning naming it, without being read."
        ),
    )
    index: str | None = Field(
        None,
        description=(
            "A knowledge index built by `anvil index`, served instead of building one from a folder "
            "at start-up (set this or `ANVIL_CORPUS_DIR`, not both): a file path, or a blob URL "
            "(`https://ACCOUNT.blob.core.windows.net/CONTAINER/NAME`, read with Entra ID). The "
            "container image sets it to its docs' index; `ANVIL_INDEX=` clears it."
        ),
    )
    answer_max_chars: int = Field(
        3000,
        ge=500,
        le=50_000,
        description=(
            "`retrieval` engine: the most characters an answer quotes (its passages are quoted "
            "whole, or by whole blocks, and a passage that does not fit is left out rather than cut)."
        ),
    )
    index_refresh_seconds: float = Field(
        60.0,
        ge=0,
        le=86_400,
        description=(
            "How often a served `ANVIL_INDEX` file is checked for a new version, which is swapped "
            "in without a restart; 0 checks never."
        ),
    )
    index_timeout_seconds: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description=(
            "Longest one look at `ANVIL_INDEX`, or one opening of it (a download or copy, and its "
            "check), may take: at start-up, start-up then fails; later, the look or the new version "
            "is tried again."
        ),
    )
    openai_base_url: str | None = Field(
        None,
        description=(
            "`openai` engine: the endpoint's base URL, e.g. `https://api.openai.com/v1` or "
            "`http://localhost:11434/v1` (Ollama). Default: OpenAI's."
        ),
    )
    openai_model: str | None = Field(None, description="`openai` engine: the model name (required).")
    openai_api_key: SecretStr | None = Field(
        None, description="`openai` engine: the API key; omit for endpoints that need none."
    )
    azure_openai_endpoint: str | None = Field(
        None,
        description=(
            "`azure-openai` engine: the resource endpoint, e.g. `https://NAME.openai.azure.com` (required)."
        ),
    )
    azure_openai_deployment: str | None = Field(
        None, description="`azure-openai` engine: the model deployment's name (required)."
    )
    azure_openai_api_version: str = Field(
        "2024-10-21", description="`azure-openai` engine: the data-plane API version."
    )
    azure_openai_api_key: SecretStr | None = Field(
        None,
        description=(
            "`azure-openai` engine: an API key. Omit it to sign in with Entra ID instead (managed "
            "identity in Azure, honouring `AZURE_CLIENT_ID`; developer credentials locally)."
        ),
    )
    answer_timeout_seconds: float = Field(
        60.0, gt=0, le=600, description="Longest wait for the language model's answer before the ask fails."
    )
    answer_max_output_tokens: int = Field(
        800, ge=16, le=32_768, description="Most tokens the language model may write for one answer."
    )
    answer_temperature: float = Field(
        0.2, ge=0, le=2, description="The language model's sampling temperature."
    )
    answer_history_tokens: int = Field(
        3000,
        ge=0,
        le=200_000,
        description="Most tokens of earlier turns sent to the language model; the oldest are left out first.",
    )
    answer_passages: int = Field(
        5, ge=1, le=20, description="How many corpus passages a language-model answer is grounded on."
    )

    @field_validator("openai_base_url", "azure_openai_endpoint")
    @classmethod
    def _model_endpoint(cls, value: str | None) -> str | None:
        return None if value is None else checked_url(value, example="https://api.example.com/v1")

    @model_validator(mode="after")
    def _engine_has_a_model(self) -> Self:
        if self.answer_engine == "openai" and not self.openai_model:
            raise ValueError("ANVIL_ANSWER_ENGINE=openai needs ANVIL_OPENAI_MODEL (the model to call)")
        if self.answer_engine == "azure-openai":
            missing = [
                f"ANVIL_{name.upper()}"
                for name in ("azure_openai_endpoint", "azure_openai_deployment")
                if not getattr(self, name)
            ]
            if missing:
                raise ValueError(f"ANVIL_ANSWER_ENGINE=azure-openai needs {' and '.join(missing)}")
        return self

    @model_validator(mode="after")
    def _one_knowledge(self) -> Self:
        if self.index is not None and self.corpus_dir is not None:
            raise ValueError(
                f"ANVIL_INDEX ({self.index}) and ANVIL_CORPUS_DIR ({self.corpus_dir}) are both set, and "
                "Anvil serves one: to answer from the folder, clear ANVIL_INDEX (`ANVIL_INDEX=`; the "
                "container image sets it to its own docs' index); to serve the index, unset ANVIL_CORPUS_DIR"
            )
        return self

    @field_validator("corpus_site")
    @classmethod
    def _site_is_a_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_url(value, example="https://docs.example.com")

    @field_validator("corpus_site_style", mode="before")
    @classmethod
    def _no_style_when_empty(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _style_has_a_site(self) -> Self:
        if self.corpus_site_style is not None and self.corpus_site is None:
            raise ValueError(
                f"ANVIL_CORPUS_SITE_STYLE ({self.corpus_site_style}) says how a site names its pages, "
                "and ANVIL_CORPUS_SITE names no site: set ANVIL_CORPUS_SITE too, or unset the style"
            )
        return self

    @field_validator("index")
    @classmethod
    def _index_is_a_path_or_a_blob(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            return None  # `ANVIL_INDEX=` clears it (the container image sets one)
        if value is not None and "://" in value:
            from app.blob_urls import BlobStorageError, is_blob_url, parse_blob_url

            if not is_blob_url(value):
                raise ValueError(
                    f"{value} is neither a file path nor a blob URL: give "
                    "https://ACCOUNT.blob.core.windows.net/CONTAINER/NAME or a path"
                )
            try:
                parse_blob_url(value)
            except BlobStorageError as error:
                raise ValueError(str(error)) from None
        return value

    @property
    def model_name(self) -> str | None:
        """The language model answers come from (the Azure deployment's name); None without one."""
        if self.answer_engine == "openai":
            return self.openai_model
        if self.answer_engine == "azure-openai":
            return self.azure_openai_deployment
        return None

    def knowledge_named(self) -> tuple[str | None, str | None]:
        """The knowledge's name and description as the settings give them, before any index is
        opened: the settings, else Anvil's own docs' when those are the corpus (None: not known
        until an index says)."""
        if self.knowledge_name is not None or self.index is not None or self.corpus_dir is not None:
            return self.knowledge_name, self.knowledge_description
        return BUNDLED_NAME, self.knowledge_description or BUNDLED_DESCRIPTION

    def corpus_path(self) -> Path:
        """The retrieval corpus folder: the setting, else the project's docs next to the package."""
        if self.corpus_dir is not None:
            return self.corpus_dir
        bundled = Path(__file__).resolve().parents[2] / "docs"
        return bundled if bundled.is_dir() else Path("docs")
