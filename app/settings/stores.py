"""The data folder (`DataSettings`), the Cosmos DB account (`CosmosSettings`) and the choice of
conversation store (`StoreSettings`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, model_validator

from app.settings.base import Part


class DataSettings(Part):
    """The folder Anvil keeps files in; the parts of the components that write there extend it."""

    data_dir: Path = Field(
        Path(".anvil"),
        description=(
            "Folder for what the server keeps: the SQLite database, the dev signing key, the index "
            "of the corpus (`index-cache/`) and telemetry not yet sent."
        ),
    )


class CosmosSettings(Part):
    """The Cosmos DB account, container and throttling budget of the `cosmos` store."""

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


class StoreSettings(CosmosSettings, DataSettings):
    """Which conversation store to open, with what each kind needs: the data folder (SQLite) or
    the Cosmos DB account."""

    store: Literal["sqlite", "memory", "cosmos"] = Field(
        "sqlite",
        description="Conversation store: `sqlite` (a file under the data dir), `memory`, or `cosmos`.",
    )
    store_timeout_seconds: float = Field(
        5.0,
        gt=0,
        le=300,
        description=(
            "Longest wait for one conversation store call (throttling retries included); past it "
            "the request is answered 503 with `Retry-After`."
        ),
    )

    @model_validator(mode="after")
    def _cosmos_has_an_endpoint(self) -> Self:
        if self.store == "cosmos" and not self.cosmos_endpoint:
            raise ValueError("ANVIL_STORE=cosmos needs ANVIL_COSMOS_ENDPOINT (the account's https URL)")
        return self
