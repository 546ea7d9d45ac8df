"""The one way Anvil reaches an OpenAI-compatible or Azure OpenAI endpoint, for the chat engines
and the embedders alike: how its client is built (`OpenAIEndpoint.client`) and how what it
answers becomes an Anvil error (`failure`).

Clients are built with retries off: a 429 or 503 becomes the "busy, retry in N s" error with the
endpoint's own wait, rather than a request that sleeps through it. Azure OpenAI is reached with
Entra ID (the managed identity in Azure, developer credentials locally) unless a key is given.
A key is handed to the SDK and never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.errors import EngineFailed, busy

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

logger = logging.getLogger(__name__)

#: The scope of an Entra ID token for Azure OpenAI.
AZURE_OPENAI_SCOPE = "https://cognitiveservices.azure.com/.default"

#: The wait suggested when a busy endpoint says nothing about when to come back.
DEFAULT_RETRY_AFTER = 5.0


@dataclass(frozen=True)
class OpenAIEndpoint:
    """Where an endpoint is: an OpenAI-compatible `base_url` (None: OpenAI's own), or an Azure
    OpenAI `azure_endpoint` with its `api_version`; signed with `key`, or, on Azure without one,
    with Entra ID. `timeout` bounds each call (seconds)."""

    timeout: float
    base_url: str | None = None
    key: str | None = None
    azure_endpoint: str | None = None
    api_version: str | None = None

    @property
    def keyless(self) -> bool:
        """An OpenAI-compatible endpoint that takes no key (Ollama, a local server)."""
        return self.azure_endpoint is None and not self.key

    @property
    def extra_headers(self) -> dict[str, Any] | None:
        """Per-request headers: a keyless endpoint is sent no `Authorization` header at all,
        rather than the made-up key the SDK insists on being given."""
        if not self.keyless:
            return None
        import openai

        return {"Authorization": openai.omit}

    def client(self) -> tuple[OpenAI, Callable[[], None] | None]:
        """A blocking client, and what closes the credential that signs its requests (if any)."""
        import openai

        common: dict[str, Any] = {"max_retries": 0, "timeout": self.timeout}
        if self.azure_endpoint is None:
            return openai.OpenAI(base_url=self.base_url, api_key=self.key or "unused", **common), None
        if self.key:
            return openai.AzureOpenAI(
                azure_endpoint=self.azure_endpoint, api_version=self.api_version, api_key=self.key, **common
            ), None
        from azure.identity import DefaultAzureCredential, get_bearer_token_provider

        credential = DefaultAzureCredential()
        return openai.AzureOpenAI(
            azure_endpoint=self.azure_endpoint,
            api_version=self.api_version,
            azure_ad_token_provider=get_bearer_token_provider(credential, AZURE_OPENAI_SCOPE),
            **common,
        ), credential.close

    def async_client(self) -> tuple[AsyncOpenAI, Callable[[], Awaitable[None]] | None]:
        """An asynchronous client, and what closes the credential that signs its requests (if any)."""
        import openai

        common: dict[str, Any] = {"max_retries": 0, "timeout": self.timeout}
        if self.azure_endpoint is None:
            return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.key or "unused", **common), None
        if self.key:
            return openai.AsyncAzureOpenAI(
                azure_endpoint=self.azure_endpoint, api_version=self.api_version, api_key=self.key, **common
            ), None
        from azure.identity.aio import DefaultAzureCredential, get_bearer_token_provider

        credential = DefaultAzureCredential()
        return openai.AsyncAzureOpenAI(
            azure_endpoint=self.azure_endpoint,
            api_version=self.api_version,
            azure_ad_token_provider=get_bearer_token_provider(credential, AZURE_OPENAI_SCOPE),
            **common,
        ), credential.close


@dataclass(frozen=True)
class Wording:
    """How errors of one kind of endpoint read: what it is ("The language model"), what its
    credentials are, what the operator checks when it does not know the model, and what a caller
    does about a request it refuses (None: it is a failure like any other)."""

    what: str
    credentials: str
    unknown_model: str
    refused: str | None = None


def failure(error: Exception, wording: Wording, timeout: float) -> Exception:
    """The Anvil error for a failed call; anything that is not the SDK's (or a timeout) passes
    through unchanged."""
    import openai

    what = wording.what
    if isinstance(error, openai.APITimeoutError | TimeoutError):
        narrower = ", or ask a narrower question" if wording.refused is not None else ""
        return EngineFailed(f"{what} did not answer within {timeout:g} s; ask again{narrower}.")
    if isinstance(error, openai.APIConnectionError):
        return EngineFailed(f"Anvil could not reach {_lower(what)}; ask again in a moment.")
    if not isinstance(error, openai.APIStatusError):
        return error
    status = error.status_code
    if status in (429, 503):
        return busy(what, error.response.headers, DEFAULT_RETRY_AFTER)
    if status in (401, 403):
        logger.warning("%s refused Anvil's credentials (HTTP %d)", what, status)
        return EngineFailed(
            f"{what} refused Anvil's credentials (HTTP {status}); the operator must check "
            f"{wording.credentials}."
        )
    if status == 404:
        logger.warning("%s answered 404: check the model or deployment name", what)
        return EngineFailed(
            f"{what} does not know the configured model or deployment (HTTP 404); {wording.unknown_model}."
        )
    if wording.refused is not None and 400 <= status < 500:
        return EngineFailed(
            f"{what} refused the request (HTTP {status}: {reason(error)}); {wording.refused}."
        )
    return EngineFailed(f"{what} failed (HTTP {status}); ask again in a moment.")


def reason(error: Any) -> str:
    """The endpoint's own error message, short and on one line."""
    body = getattr(error, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message or getattr(error, "message", "") or "no reason given")
    return " ".join(text.split())[:200]


def _lower(what: str) -> str:
    return what[:1].lower() + what[1:]
