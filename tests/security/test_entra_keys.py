"""Signing keys over a real server: rotation, a flood of unknown key ids, Entra down and back up."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from support.anvil_server import AnvilServer, free_port, run_anvil
from support.entra_issuer import EntraIssuer, running_issuer
from support.entra_keys import signing_key
from support.jsonrpc import LEGACY, envelope

from .calls import CLIENT_ID, TENANT, ask_mcp, entra_env, new_id, rows_for

#: Short enough to wait out in a test, long enough to hold a whole flood inside one window.
COOLDOWN = 1.0
POLL = 0.05


def poll_until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    """Check `condition` every POLL seconds until it holds; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(POLL)  # polling interval, not synchronisation


def accepted(server: AnvilServer, token: str) -> bool:
    return ask_mcp(server, token, "ping").status_code == 200


@pytest.fixture(scope="module")
def rotating_issuer() -> Iterator[EntraIssuer]:
    with running_issuer(CLIENT_ID, keys=[signing_key("rotation-a")]) as issuer:
        yield issuer


@pytest.fixture(scope="module")
def rotating(rotating_issuer: EntraIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnvilServer]:
    env = entra_env(rotating_issuer, ANVIL_ENTRA_KEY_REFRESH_SECONDS=str(COOLDOWN))
    with run_anvil(tmp_path_factory.mktemp("entra-keys"), env) as server:
        yield server


def test_a_new_key_is_accepted_after_exactly_one_refetch(
    rotating: AnvilServer, rotating_issuer: EntraIssuer
) -> None:
    issuer = rotating_issuer
    issuer.publish(signing_key("rotation-a"))
    assert accepted(rotating, issuer.mint_v2(oid=new_id(""), tid=TENANT))
    fetches = issuer.key_fetches

    issuer.publish(signing_key("rotation-b"), signing_key("rotation-a"))
    rotated = issuer.mint_v2(oid=new_id(""), tid=TENANT)
    assert issuer.key.kid == "rotation-b"
    # Refused while the cooldown since the last fetch lasts, then accepted after one refetch.
    poll_until(lambda: accepted(rotating, rotated))

    assert issuer.key_fetches == fetches + 1
    old = issuer.sign(issuer.claims_v2(oid=new_id(""), tid=TENANT), key=signing_key("rotation-a"))
    assert accepted(rotating, old)
    assert issuer.key_fetches == fetches + 1


async def flood(server: AnvilServer, tokens: list[str]) -> list[int]:
    """POST every token at once; the status codes in order."""
    statuses = [0] * len(tokens)
    call = envelope("tools/call", {"name": "ask", "arguments": {}}, version=LEGACY)

    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=len(tokens))) as client:

        async def one(index: int, token: str) -> None:
            headers = {**call.headers, "Authorization": f"Bearer {token}"}
            statuses[index] = (await client.post(server.mcp_url, json=call.body, headers=headers)).status_code

        async with anyio.create_task_group() as group:
            for index, token in enumerate(tokens):
                group.start_soon(one, index, token)
    return statuses


@pytest.mark.anyio
async def test_a_flood_of_unknown_kids_refetches_at_most_once_per_cooldown(
    rotating: AnvilServer, rotating_issuer: EntraIssuer
) -> None:
    issuer = rotating_issuer
    rogue = signing_key("rogue-key")
    claims = issuer.claims_v2(oid=new_id(""), tid=TENANT)
    started, fetches_at_start = time.monotonic(), issuer.key_fetches
    refetched_during_a_flood = False
    while not refetched_during_a_flood:
        before = issuer.key_fetches
        tokens = [issuer.sign(claims, key=rogue, kid=f"unknown-{new_id('')}") for _ in range(20)]
        statuses = await flood(rotating, tokens)
        assert statuses == [401] * 20
        # 20 unknown kids at once: one shared refetch when the cooldown is over, else none.
        assert issuer.key_fetches - before <= 1
        refetched_during_a_flood = issuer.key_fetches - before == 1
        assert time.monotonic() - started < 15, "no flood ever came after a cooldown"
        await anyio.sleep(0.2)  # polling interval between waves, not synchronisation

    waves_of_cooldown = (time.monotonic() - started) / COOLDOWN
    assert issuer.key_fetches - fetches_at_start <= waves_of_cooldown + 1


def readiness(server: AnvilServer) -> httpx.Response:
    return httpx.get(f"{server.url}/readyz")


def test_entra_unreachable_at_start_up_then_reachable(tmp_path: Path) -> None:
    issuer = EntraIssuer(client_id=CLIENT_ID, port=free_port(), keys=[signing_key("late-key")])
    env = entra_env(issuer, ANVIL_ENTRA_KEY_REFRESH_SECONDS="0.5")
    with run_anvil(tmp_path / "data", env) as server:
        # Started although Entra is down, and says so.
        down = readiness(server)
        assert down.status_code == 503
        assert down.json()["checks"]["signing-keys"].startswith("unavailable")
        assert down.json()["checks"]["store"] == "ok"
        conversation_id = new_id("early")
        early = ask_mcp(server, issuer.mint_v2(oid=new_id(""), tid=TENANT), "too early", conversation_id)
        # Not the token's fault: a retryable 503, not a 401 that would send the client to sign in.
        assert early.status_code == 503 and int(early.headers["retry-after"]) >= 1
        assert "signing keys" in early.json()["detail"]
        assert rows_for(server.data_dir, conversation_id) == 0

        issuer.start()
        try:
            poll_until(lambda: readiness(server).status_code == 200)
            assert accepted(server, issuer.mint_v2(oid=new_id(""), tid=TENANT))
        finally:
            issuer.stop()

        # Entra down again: the cached keys keep serving, and the service stays ready.
        fetches = issuer.key_fetches
        assert accepted(server, issuer.mint_v2(oid=new_id(""), tid=TENANT))
        assert readiness(server).status_code == 200
        unknown = issuer.sign(issuer.claims_v2(oid=new_id(""), tid=TENANT), key=signing_key("rogue-key"))
        assert ask_mcp(server, unknown, "q").status_code == 401
        assert accepted(server, issuer.mint_v2(oid=new_id(""), tid=TENANT))
        assert issuer.key_fetches == fetches
    assert "could not load signing keys" in server.log()
