"""Sign-in with Microsoft Entra ID (`ANVIL_AUTH_MODE=entra`).

The trusted issuers and the signing keys come from the tenant's two OpenID configuration
documents under the authority, read when the first token (or readiness probe) needs them:

- v2 `{authority}/{tenant}/v2.0/.well-known/openid-configuration`: the v2 issuer and `jwks_uri`;
- v1 `{authority}/{tenant}/.well-known/openid-configuration`: the v1 issuer (on the public cloud
  `https://sts.windows.net/{tid}/`, which no rule could derive from the authority).

For a multi-tenant app (`organizations`/`common`) both issuers hold a `{tenantid}` placeholder
that is filled with the token's own `tid`; the tenant allow-list then decides who gets in.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

import app
from app.auth.jwks import JwksKeySource, get_json
from app.auth.opened import AuthSetup
from app.auth.verifier import TokenVerifier
from app.settings.auth import MULTI_TENANT, EntraSettings
from app.urls import checked_url

logger = logging.getLogger(__name__)

TENANT_PLACEHOLDER = "{tenantid}"
#: Seconds for any one request to Entra; a token check waits at most this long for keys.
HTTP_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class TenantConfiguration:
    """What the discovery documents say: issuer templates (v2, v1) and the key set's URL."""

    issuers: tuple[str, ...]
    jwks_uri: str


def discovery_urls(authority: str, tenant: str) -> tuple[str, str]:
    """The v2 and v1 OpenID configuration URLs of `tenant` under `authority`."""
    base = f"{authority.rstrip('/')}/{tenant}"
    return f"{base}/v2.0/.well-known/openid-configuration", f"{base}/.well-known/openid-configuration"


class EntraDiscovery:
    """The tenant's issuers and key set URL, read once from its discovery documents.

    A failed read is not remembered: the next `jwks_uri()` call reads again. Callers serialise
    the calls (the key source fetches one at a time).
    """

    def __init__(self, client: httpx.AsyncClient, authority: str, tenant: str) -> None:
        self._client = client
        self._v2_url, self._v1_url = discovery_urls(authority, tenant)
        self._configuration: TenantConfiguration | None = None

    async def jwks_uri(self) -> str:
        """The key set's URL, reading both discovery documents the first time."""
        if self._configuration is None:
            self._configuration = await self._read()
        return self._configuration.jwks_uri

    def issuers_for_tenant(self, tid: str) -> tuple[str, ...]:
        """The v2 and v1 issuers a token of tenant `tid` may carry (none before discovery)."""
        if self._configuration is None:
            return ()
        return tuple(issuer.replace(TENANT_PLACEHOLDER, tid) for issuer in self._configuration.issuers)

    async def _read(self) -> TenantConfiguration:
        v2 = await get_json(self._client, self._v2_url)
        v1 = await get_json(self._client, self._v1_url)
        jwks_uri = _field(v2, "jwks_uri", self._v2_url)
        try:
            checked_url(jwks_uri, https=True, bare=False, example="https://login.example/tenant/keys")
        except ValueError as error:
            raise ValueError(f"jwks_uri of {self._v2_url} {error}") from None
        configuration = TenantConfiguration(
            issuers=(_field(v2, "issuer", self._v2_url), _field(v1, "issuer", self._v1_url)),
            jwks_uri=jwks_uri,
        )
        logger.info("read Entra discovery documents: issuers %s", ", ".join(configuration.issuers))
        return configuration


def _field(document: object, name: str, url: str) -> str:
    value = document.get(name) if isinstance(document, dict) else None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{url} has no {name!r}")
    return value


def build_verifier(settings: EntraSettings, discovery: EntraDiscovery, keys: JwksKeySource) -> TokenVerifier:
    """The verifier for Entra access tokens: audience, tenant rule, scopes and app role from settings."""
    tenant, client_id = _require(settings)
    listed = frozenset(t.lower() for t in settings.entra_allowed_tenants)
    if tenant in MULTI_TENANT:
        allowed = listed
    else:
        # A single-tenant app takes its own tenant only, whatever a token's issuer claims; an
        # allow-list can only narrow that.
        allowed = frozenset({tenant}) & listed if listed else frozenset({tenant})
    return TokenVerifier(
        keys=keys,
        issuers_for_tenant=discovery.issuers_for_tenant,
        audiences=(client_id, f"api://{client_id}"),
        required_scopes=settings.entra_required_scopes,
        allowed_tenants=allowed,
        app_role=settings.entra_app_role,
    )


def _require(settings: EntraSettings) -> tuple[str, str]:
    """Tenant and client id, lower-cased as Entra writes them into tokens (the settings checked them)."""
    tenant, client_id = settings.entra_tenant_id, settings.entra_client_id
    if not tenant or not client_id:
        raise ValueError("ANVIL_AUTH_MODE=entra needs ANVIL_ENTRA_TENANT_ID and ANVIL_ENTRA_CLIENT_ID")
    return tenant.lower(), client_id.lower()


async def open_entra(settings: EntraSettings) -> AuthSetup:
    """Entra sign-in: opens the HTTP client (closed by `aclose`) and fetches nothing yet."""
    tenant, client_id = _require(settings)
    authority = settings.entra_authority_url
    client = httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, headers={"User-Agent": f"anvil/{app.__version__}"}, follow_redirects=False
    )
    discovery = EntraDiscovery(client, authority, tenant)
    keys = JwksKeySource(client, discovery.jwks_uri, refresh_seconds=settings.entra_key_refresh_seconds)
    try:
        verifier = build_verifier(settings, discovery, keys)
    except BaseException:
        await client.aclose()
        raise

    async def aclose() -> None:
        await keys.aclose()
        await client.aclose()

    return AuthSetup(
        verifier=verifier,
        authorization_servers=(f"{authority}/{tenant}/v2.0",),
        scopes_supported=tuple(f"api://{client_id}/{scope}" for scope in settings.entra_required_scopes),
        readiness=keys.ensure_loaded,
        aclose=aclose,
    )
