"""Anvil's settings: one pydantic-settings model, read from `ANVIL_*` environment variables.

Every field has a description; `docs/configuration.md` lists them all (a test keeps the two in
step). Unsafe combinations are refused here, so a misconfigured service stops at start-up with
one clear line instead of misbehaving later.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.urls import checked_url, is_loopback

LIST_FORMS = 'the values separated by commas (one,two) or a JSON list of strings (["one","two"])'
#: No value of a list setting (a Host, an Origin, a scope, a tenant id) holds a quote, a comma or
#: a space: one that does is a quoted or space-separated list read as one value, matching nothing.
_NOT_IN_LIST_VALUES = re.compile(r"[\s\"',]")
#: The most ANVIL_MAX_QUESTION_CHARS may be: the longest text argument any configuration accepts.
MAX_TEXT_CHARS = 32_000


def _starts_with_ipv6_host(text: str) -> bool:
    """Whether `text` starts with a bracketed IPv6 address, as the Host `[::1]:8000` does."""
    end = text.find("]")
    if end < 0:
        return False
    try:
        ipaddress.IPv6Address(text[1:end])
    except ValueError:
        return False
    return True


def parse_list(value: object) -> object:
    """The values of a list setting given as text: comma-separated, or a JSON list of strings.

    Text starting with `[` is taken for JSON, unless it starts with a bracketed IPv6 address (a
    Host value), so a list in another form stops start-up instead of being read as values that
    match nothing. Values that are already a list (from Python) are left to the type check.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("[") and not _starts_with_ipv6_host(text):
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if not isinstance(decoded, list) or not all(isinstance(item, str) for item in decoded):
            raise ValueError(f"starts with '[' but is not a JSON list of strings; write {LIST_FORMS}")
        items = [item.strip() for item in decoded]
        if not all(items):
            raise ValueError(f"the JSON list holds an empty string; write {LIST_FORMS}")
    else:
        items = [item.strip() for item in text.split(",") if item.strip()]
    for item in items:
        if _NOT_IN_LIST_VALUES.search(item):
            raise ValueError(f"the value {item!r} holds a quote, a comma or a space; write {LIST_FORMS}")
    return items


#: A list setting: `NoDecode` hands `parse_list` the variable's text as it is.
CommaList = Annotated[list[str], NoDecode, BeforeValidator(parse_list)]

LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
MULTI_TENANT = ("organizations", "common")
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _is_guid(value: str) -> bool:
    return _GUID.fullmatch(value) is not None


class Settings(BaseSettings):
    """Every setting Anvil reads. Environment variables carry the `ANVIL_` prefix."""

    model_config = SettingsConfigDict(env_prefix="ANVIL_", extra="ignore", frozen=True)

    host: str = Field("127.0.0.1", description="Address `anvil serve` binds to.")
    port: int = Field(8000, ge=1, le=65535, description="Port `anvil serve` listens on.")
    public_url: str | None = Field(
        None,
        description=(
            "Base URL clients use to reach Anvil (e.g. `https://anvil.example.com`); names the protected "
            "resource in sign-in metadata. Default: `http://<host>:<port>`."
        ),
    )
    auth_mode: Literal["dev", "entra", "none"] = Field(
        "dev",
        description=(
            "`dev`: tokens from `anvil token`, loopback only; `entra`: Microsoft Entra ID access "
            "tokens; `none`: anonymous callers, every answer one-shot."
        ),
    )
    entra_tenant_id: str | None = Field(
        None,
        description=(
            "Entra tenant (directory) id, a GUID; or `organizations`/`common` for a multi-tenant app "
            "together with `ANVIL_ENTRA_ALLOWED_TENANTS`."
        ),
    )
    entra_client_id: str | None = Field(
        None, description="Application (client) id of Anvil's API app registration, a GUID."
    )
    entra_authority: str = Field(
        "https://login.microsoftonline.com",
        description="Entra authority host; sovereign clouds (and tests) set another.",
    )
    entra_required_scopes: CommaList = Field(
        default_factory=lambda: ["access_as_user"],
        description="Comma-separated delegated scopes every token must carry in `scp`.",
    )
    entra_allowed_tenants: CommaList = Field(
        default_factory=list,
        description="Comma-separated tenant ids accepted by a multi-tenant app.",
    )
    entra_app_role: str | None = Field(
        None,
        description=(
            "App role that admits app-only tokens (`roles`, no `scp`); unset: app-only tokens are refused."
        ),
    )
    entra_key_refresh_seconds: float = Field(
        300.0,
        ge=0,
        le=86_400,
        description="Least time between two refetches of Entra's signing keys on an unknown key id.",
    )
    store: Literal["sqlite", "memory", "cosmos"] = Field(
        "sqlite",
        description="Conversation store: `sqlite` (a file under the data dir), `memory`, or `cosmos`.",
    )
    cosmos_endpoint: str | None = Field(
        None,
        description="Azure Cosmos DB account endpoint, e.g. `https://<account>.documents.azure.com:443/`.",
    )
    cosmos_key: SecretStr | None = Field(
        None,
        description="Cosmos DB account key; unset: sign in with `DefaultAzureCredential` (managed identity).",
    )
    cosmos_database: str = Field("anvil", description="Cosmos DB database name.")
    cosmos_container: str = Field(
        "conversations", description="Cosmos DB container name (partition key `/oid`)."
    )
    cosmos_create_if_missing: bool = Field(
        False,
        description=(
            "Create the database and container at start-up (local runs and tests; in Azure, "
            "Terraform creates them and data-plane roles cannot)."
        ),
    )
    cosmos_throttle_retries: int = Field(
        9, ge=0, le=100, description="Times a throttled (429) Cosmos DB request is retried."
    )
    cosmos_throttle_wait_seconds: float = Field(
        30.0, ge=0, le=300, description="Most time spent retrying throttled Cosmos DB requests for one call."
    )
    data_dir: Path = Field(
        Path(".anvil"), description="Folder for the SQLite database and the dev signing key."
    )
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
            "Markdown (`*.md`, `*.mdx`) folder every engine but echo answers from. "
            "Default: the project's `docs/`."
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
    history_max_turns: int = Field(
        50, ge=1, le=1000, description="Turns kept per conversation; older turns are dropped."
    )
    history_max_bytes: int = Field(
        262_144,
        ge=4096,
        le=1_048_576,
        description="Bytes of questions and answers kept per conversation; older turns are dropped.",
    )
    history_ttl_seconds: int = Field(
        2_592_000, ge=60, description="A conversation expires this many seconds after its last turn."
    )
    max_question_chars: int = Field(
        8000, ge=1, le=MAX_TEXT_CHARS, description="Longest `question` accepted, in characters."
    )
    max_body_bytes: int = Field(
        65_536, ge=1024, le=1_048_576, description="Largest request body accepted, in bytes (413 above)."
    )
    max_conversations_per_user: int = Field(
        1000,
        ge=1,
        le=10_000_000,
        description="Live conversations one user may keep in a tenant; creating one more is refused (409).",
    )
    rate_limit_per_minute: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Requests one caller may make a minute on one replica (429 beyond); 0: no limit.",
    )
    body_timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=300,
        description="A signed-in request's body must arrive within this many seconds (408 otherwise).",
    )
    keep_alive_seconds: int = Field(
        5, ge=1, le=3600, description="An idle keep-alive connection is closed after this many seconds."
    )
    header_timeout_seconds: float = Field(
        10.0,
        gt=0,
        le=300,
        description=(
            "A request's line and headers must arrive within this many seconds of the connection "
            "opening (or of their first byte, on a kept-alive connection): 408 and closed otherwise."
        ),
    )
    max_header_bytes: int = Field(
        32_768,
        ge=4096,
        le=1_048_576,
        description="Largest request line and headers accepted, in bytes (431 and closed above).",
    )
    max_concurrent_requests: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="Connections and requests one process serves at once; beyond it, new ones get 503.",
    )
    drain_seconds: int = Field(
        20,
        ge=0,
        le=3600,
        description="On SIGTERM, requests in flight get this long to finish before the process exits.",
    )
    allowed_hosts: CommaList = Field(
        default_factory=list,
        description=(
            "Comma-separated Host header values accepted besides loopback and the public URL's host "
            "(`name:*` allows any port, `*` allows any host)."
        ),
    )
    allowed_origins: CommaList = Field(
        default_factory=list,
        description=(
            "Comma-separated browser Origins accepted besides the public URL's origin; requests with "
            "any other Origin get 403. Requests without an Origin are accepted."
        ),
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    log_format: Literal["json", "text"] = Field(
        "json", description="`json`: one JSON object per line on standard output; `text`: plain lines."
    )
    access_log: bool = Field(
        False, description="Log one line per request: method, route, status, duration (costs CPU: see docs)."
    )
    telemetry_aad_auth: bool = Field(
        False,
        description="Send to Application Insights signed in with the managed identity (`AZURE_CLIENT_ID`).",
    )
    telemetry_capture_content: bool = Field(
        False, description="Put questions and answers on the answer engine's spans (off: never exported)."
    )
    telemetry_pseudonym_key: SecretStr | None = Field(
        None,
        description=(
            "Key of the hashes that stand for user and conversation ids in telemetry; the same on "
            "every replica to correlate them. Unset: a random key per process."
        ),
    )
    mcp_spans: Literal["auto", "on", "off"] = Field(
        "auto",
        description=(
            "OpenTelemetry spans for MCP requests (the SDK's span per message): `auto` keeps them "
            "when a tracer provider is configured at start-up, `on` always, `off` never."
        ),
    )

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_url(value)

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Self:
        if self.auth_mode == "dev" and not is_loopback(self.host):
            raise ValueError(
                f"ANVIL_AUTH_MODE=dev signs in anyone holding the local key, so it only binds to loopback "
                f"(got host {self.host!r}); use --host 127.0.0.1 or configure real sign-in"
            )
        if self.auth_mode == "entra":
            self._check_entra()
        if self.store == "cosmos" and not self.cosmos_endpoint:
            raise ValueError("ANVIL_STORE=cosmos needs ANVIL_COSMOS_ENDPOINT (the account's https URL)")
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

    @field_validator("openai_base_url", "azure_openai_endpoint")
    @classmethod
    def _model_endpoint(cls, value: str | None) -> str | None:
        return None if value is None else checked_url(value, example="https://api.example.com/v1")

    def _check_entra(self) -> None:
        tenant = self.entra_tenant_id
        if not tenant:
            raise ValueError("ANVIL_AUTH_MODE=entra needs ANVIL_ENTRA_TENANT_ID (the directory id, a GUID)")
        if tenant in MULTI_TENANT:
            if not self.entra_allowed_tenants:
                raise ValueError(
                    f"ANVIL_ENTRA_TENANT_ID={tenant} accepts other directories, so "
                    "ANVIL_ENTRA_ALLOWED_TENANTS must list the tenant ids to admit"
                )
        elif not _is_guid(tenant):
            raise ValueError(
                "ANVIL_ENTRA_TENANT_ID must be a GUID, or organizations/common for a multi-tenant app"
            )
        bad = [t for t in self.entra_allowed_tenants if not _is_guid(t)]
        if bad:
            raise ValueError("ANVIL_ENTRA_ALLOWED_TENANTS must list tenant GUIDs")
        if not self.entra_client_id or not _is_guid(self.entra_client_id):
            raise ValueError(
                "ANVIL_AUTH_MODE=entra needs ANVIL_ENTRA_CLIENT_ID, the API app's client id (a GUID)"
            )
        if self.entra_app_role is not None and not re.fullmatch(r"[\w.:/-]{1,120}", self.entra_app_role):
            raise ValueError("ANVIL_ENTRA_APP_ROLE must be one app role value, without spaces")
        if any(not re.fullmatch(r"[\w.:/-]{1,120}", scope) for scope in self.entra_required_scopes):
            raise ValueError("ANVIL_ENTRA_REQUIRED_SCOPES must list scope names without spaces")
        if not self.entra_required_scopes:
            raise ValueError("ANVIL_ENTRA_REQUIRED_SCOPES must name at least one delegated scope")
        try:
            checked_url(self.entra_authority, https=True, example="https://login.microsoftonline.com")
        except ValueError as error:
            raise ValueError(f"ANVIL_ENTRA_AUTHORITY {error}") from None

    @property
    def entra_authority_url(self) -> str:
        """The authority without a trailing slash."""
        return self.entra_authority.rstrip("/")

    @property
    def base_url(self) -> str:
        """The public URL, or the local address when none is configured."""
        if self.public_url:
            return self.public_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def resource_url(self) -> str:
        """The protected resource clients sign in for: the MCP endpoint."""
        return f"{self.base_url}/mcp"

    def host_patterns(self) -> list[str]:
        """Host header values accepted: loopback, the public URL's host, and `allowed_hosts`."""
        patterns = [*LOOPBACK_HOSTS, *self.allowed_hosts]
        if self.public_url:
            netloc = urlsplit(self.public_url).netloc
            patterns.append(netloc)
            if ":" not in netloc.rsplit("]", 1)[-1]:
                patterns.append(f"{netloc}:*")
        return patterns

    def origin_patterns(self) -> list[str]:
        """Origin header values accepted: Anvil's own origins and `allowed_origins`.

        Anvil's own origin is its public URL's, and on a loopback bind its loopback address and
        port: a page there can only be Anvil itself.
        """
        patterns = list(self.allowed_origins)
        if is_loopback(self.host):
            patterns += [f"http://{name}:{self.port}" for name in ("127.0.0.1", "localhost", "[::1]")]
        if self.public_url:
            parts = urlsplit(self.public_url)
            patterns.append(f"{parts.scheme}://{parts.netloc}")
        return patterns

    def corpus_path(self) -> Path:
        """The retrieval corpus folder: the setting, else the project's docs next to the package."""
        if self.corpus_dir is not None:
            return self.corpus_dir
        bundled = Path(__file__).resolve().parent.parent / "docs"
        return bundled if bundled.is_dir() else Path("docs")


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """`ANVIL_*` variables that name no setting (typos would otherwise be silently ignored)."""
    known = {f"ANVIL_{name.upper()}" for name in Settings.model_fields}
    return sorted(name for name in environ if name.upper().startswith("ANVIL_") and name.upper() not in known)


def describe_error(error: Exception) -> str:
    """One line naming each invalid setting and why, for start-up failures."""
    from pydantic import ValidationError

    if not isinstance(error, ValidationError):
        return str(error)
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"])
        msg = item["msg"].removeprefix("Value error, ")
        parts.append(f"ANVIL_{field.upper()}: {msg}" if field else msg)
    return "; ".join(parts)
