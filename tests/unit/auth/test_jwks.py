"""JwksKeySource on its own: cache, cooldown, one shared fetch, outages, and which keys count."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from support.entra_keys import signing_key

from app.auth.jwks import EMPTY_RETRY_SECONDS, JwksKeySource, SigningKeysUnavailable, signing_keys
from app.errors import AuthError

pytestmark = pytest.mark.anyio

JWKS_URL = "https://login.example.invalid/tenant/discovery/v2.0/keys"
COOLDOWN = 300.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class KeyEndpoint:
    """A MockTransport handler serving `jwks`, counting requests, failing while `down` is set."""

    def __init__(self, *kids: str) -> None:
        self.jwks: dict[str, Any] = {"keys": [signing_key(kid).jwk() for kid in kids]}
        self.requests = 0
        self.down = False
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    def serve(self, *kids: str) -> None:
        self.jwks = {"keys": [signing_key(kid).jwk() for kid in kids]}

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json=self.jwks)


@pytest.fixture
async def client() -> AsyncIterator[Callable[[KeyEndpoint], httpx.AsyncClient]]:
    opened: list[httpx.AsyncClient] = []

    def make(endpoint: KeyEndpoint) -> httpx.AsyncClient:
        opened.append(httpx.AsyncClient(transport=httpx.MockTransport(endpoint)))
        return opened[-1]

    yield make
    for each in opened:
        await each.aclose()


def source(
    make: Callable[[KeyEndpoint], httpx.AsyncClient], endpoint: KeyEndpoint, clock: Clock
) -> JwksKeySource:
    return JwksKeySource(make(endpoint), JWKS_URL, refresh_seconds=COOLDOWN, clock=clock)


async def refused(call: Awaitable[Any]) -> AuthError:
    with pytest.raises(AuthError) as caught:
        await call
    assert caught.value.status == 401
    return caught.value


async def test_keys_are_fetched_on_first_use_and_then_served_from_the_cache(client: Any) -> None:
    endpoint = KeyEndpoint("k1", "k2")
    keys = source(client, endpoint, Clock())
    assert endpoint.requests == 0  # nothing is fetched before it is needed

    first = await keys.key_for("k1")
    assert await keys.key_for("k2") is not None
    assert await keys.key_for("k1") is first

    assert endpoint.requests == 1
    assert keys.kids == {"k1", "k2"}


async def test_an_unknown_kid_refetches_at_most_once_per_cooldown(client: Any) -> None:
    endpoint, clock = KeyEndpoint("k1"), Clock()
    keys = source(client, endpoint, clock)
    await keys.key_for("k1")

    clock.now += 1
    assert "not known" in (await refused(keys.key_for("new"))).description
    assert endpoint.requests == 1  # within the cooldown of the first fetch: no refetch

    endpoint.serve("k1", "new")
    clock.now += COOLDOWN
    assert await keys.key_for("new") is not None
    assert endpoint.requests == 2

    for attempt in range(10):
        clock.now += 1
        await refused(keys.key_for(f"made-up-{attempt}"))
    assert endpoint.requests == 2


async def test_concurrent_unknown_kids_share_one_fetch_in_flight(client: Any) -> None:
    endpoint, clock = KeyEndpoint("k1"), Clock()
    keys = source(client, endpoint, clock)
    await keys.key_for("k1")
    clock.now += COOLDOWN
    endpoint.serve("k1", "k2")
    endpoint.gate, endpoint.entered = asyncio.Event(), asyncio.Event()

    lookups = [asyncio.create_task(keys.key_for(kid)) for kid in ["k2"] * 10 + [f"x{i}" for i in range(10)]]
    await endpoint.entered.wait()  # the one fetch has started and is held open
    endpoint.gate.set()
    results = await asyncio.gather(*lookups, return_exceptions=True)

    assert endpoint.requests == 2
    assert all(not isinstance(result, BaseException) for result in results[:10])
    assert all(isinstance(result, AuthError) for result in results[10:])


async def test_a_waiter_that_gives_up_does_not_cancel_the_shared_fetch(client: Any) -> None:
    endpoint, clock = KeyEndpoint("k1"), Clock()
    keys = source(client, endpoint, clock)
    endpoint.gate = asyncio.Event()

    impatient = asyncio.create_task(keys.key_for("k1"))
    patient = asyncio.create_task(keys.key_for("k1"))
    await endpoint.entered.wait()
    impatient.cancel()
    endpoint.gate.set()

    assert await patient is not None
    assert impatient.cancelled()
    assert endpoint.requests == 1


async def test_cached_keys_keep_serving_while_the_endpoint_is_down(client: Any) -> None:
    endpoint, clock = KeyEndpoint("k1"), Clock()
    keys = source(client, endpoint, clock)
    await keys.key_for("k1")

    endpoint.down = True
    clock.now += COOLDOWN
    await refused(keys.key_for("unknown"))  # tries, fails, keeps what it had
    assert endpoint.requests == 2
    assert await keys.key_for("k1") is not None
    await keys.ensure_loaded()  # ready: it can still verify tokens


async def test_a_nonsense_key_set_keeps_the_cached_keys(client: Any) -> None:
    endpoint, clock = KeyEndpoint("k1"), Clock()
    keys = source(client, endpoint, clock)
    await keys.key_for("k1")

    endpoint.jwks = {"keys": [{"kty": "oct", "kid": "k9", "k": "c2VjcmV0"}]}
    clock.now += COOLDOWN
    await refused(keys.key_for("k9"))
    assert keys.kids == {"k1"}


async def test_a_refetched_set_replaces_the_old_one(client: Any) -> None:
    endpoint, clock = KeyEndpoint("k1"), Clock()
    keys = source(client, endpoint, clock)
    await keys.key_for("k1")

    endpoint.serve("k2")  # k1 withdrawn
    clock.now += COOLDOWN
    await keys.key_for("k2")

    assert keys.kids == {"k2"}
    await refused(keys.key_for("k1"))


async def test_unreachable_at_first_is_not_ready_and_retried_on_demand(client: Any) -> None:
    endpoint, clock = KeyEndpoint("k1"), Clock()
    endpoint.down = True
    keys = source(client, endpoint, clock)

    with pytest.raises(SigningKeysUnavailable):
        await keys.ensure_loaded()
    with pytest.raises(SigningKeysUnavailable, match="cannot be loaded") as unavailable:
        await keys.key_for("k1")
    assert unavailable.value.retry_after is not None and unavailable.value.retry_after > 0
    assert endpoint.requests == 1  # the second call came within the retry interval

    endpoint.down = False
    clock.now += EMPTY_RETRY_SECONDS  # much shorter than the cooldown while nothing is loaded
    await keys.ensure_loaded()
    assert await keys.key_for("k1") is not None
    assert endpoint.requests == 2


async def test_the_key_set_url_may_be_found_lazily(client: Any) -> None:
    endpoint, located = KeyEndpoint("k1"), []

    async def locate() -> str:
        located.append(JWKS_URL)
        return JWKS_URL

    keys = JwksKeySource(client(endpoint), locate, refresh_seconds=COOLDOWN, clock=Clock())
    assert located == []
    await keys.key_for("k1")
    assert located == [JWKS_URL]


async def test_a_missing_or_odd_kid_is_refused_without_a_fetch(client: Any) -> None:
    endpoint = KeyEndpoint("k1")
    keys = source(client, endpoint, Clock())
    await refused(keys.key_for(None))
    await refused(keys.key_for(""))
    await refused(keys.key_for(42))  # type: ignore[arg-type]
    assert endpoint.requests == 0


async def test_aclose_cancels_a_fetch_in_flight(client: Any) -> None:
    endpoint = KeyEndpoint("k1")
    endpoint.gate = asyncio.Event()
    keys = source(client, endpoint, Clock())
    lookup = asyncio.create_task(keys.key_for("k1"))
    await endpoint.entered.wait()

    await keys.aclose()

    with pytest.raises(asyncio.CancelledError):
        await lookup


def rsa_jwk(kid: str, **extra: Any) -> dict[str, Any]:
    return {**signing_key(kid).jwk(), **extra}


def test_only_rsa_signing_keys_are_taken() -> None:
    ec_key = ec.generate_private_key(ec.SECP256R1()).public_key()
    short = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    document = {
        "keys": [
            rsa_jwk("sig", use="sig"),
            {k: v for k, v in rsa_jwk("no-use").items() if k != "use"},
            rsa_jwk("enc", use="enc"),
            rsa_jwk("rs512", alg="RS512"),
            rsa_jwk("rs256", alg="RS256"),
            {**json.loads(ECAlgorithm.to_jwk(ec_key)), "kid": "ec", "use": "sig"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {**json.loads(RSAAlgorithm.to_jwk(short)), "kid": "short", "use": "sig"},
            {**rsa_jwk("no-kid"), "kid": None},
            {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
            "not a key",
        ]
    }
    assert set(signing_keys(document)) == {"sig", "no-use", "rs256"}


def test_a_private_jwk_yields_only_its_public_half() -> None:
    private = json.loads(RSAAlgorithm.to_jwk(signing_key("private").private_key))
    key = signing_keys({"keys": [{**private, "kid": "private"}]})["private"]
    assert isinstance(key, rsa.RSAPublicKey)


@pytest.mark.parametrize("document", [{}, {"keys": "nope"}, [], None])
def test_a_document_without_a_key_list_is_an_error(document: Any) -> None:
    with pytest.raises(ValueError):
        signing_keys(document)
