"""Where Anvil is reached and by whom (`ServeSettings`), and the limits of its HTTP serving
(`HttpLimits`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from app.settings.base import CommaList, Part
from app.urls import checked_url, is_loopback

LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")


class ServeSettings(Part):
    """The address `anvil serve` binds, the URL clients use, and the Hosts and Origins accepted."""

    host: str = Field("127.0.0.1", description="Address `anvil serve` binds to.")
    port: int = Field(8000, ge=1, le=65535, description="Port `anvil serve` listens on.")
    public_url: str | None = Field(
        None,
        description=(
            "Base URL clients use to reach Anvil (e.g. `https://anvil.example.com`); names the protected "
            "resource in sign-in metadata. Default: `http://<host>:<port>`."
        ),
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

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str | None) -> str | None:
        return None if value is None else checked_url(value)

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


class HttpLimits(Part):
    """What one request, one connection and one caller may take: enforced by the front door and
    the middlewares, and stated in the OpenAPI document."""

    max_body_bytes: int = Field(
        65_536, ge=1024, le=1_048_576, description="Largest request body accepted, in bytes (413 above)."
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
