"""Signing in with the device code flow (real MSAL against the local Entra stand-in), the token
cache it fills (`app.client.token_cache`), silent renewal, `who` and `logout`."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
import requests
from security.calls import TENANT, new_id
from support.entra_issuer import EntraIssuer
from support.sign_in import (
    API_SCOPE,
    SERVER_URL,
    USER,
    approve_at_once,
    cached_items,
    claims,
    settings_for,
    signed_in,
    stopped_for_good,
    user_code,
)

from app.client import token_cache
from app.client.discovery import SignInSettings
from app.client.errors import (
    SignInFailed,
    SignInRequired,
    SignInUnavailable,
)
from app.client.signin import Account, UserSignIn
from app.client.token_cache import default_cache_path

# --- the cache -----------------------------------------------------------------------------------


def test_the_cache_is_an_owner_only_file_in_owner_only_folders_whatever_the_umask(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    previous = os.umask(0)
    try:
        signin = signed_in(issuer, http, cache_path)
    finally:
        os.umask(previous)

    assert signin.encrypted is False
    assert stat.S_IMODE(cache_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache_path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache_path.parent.parent.stat().st_mode) == 0o700
    assert len(cached_items(cache_path, "RefreshToken")) == 1


def test_an_existing_cache_file_is_narrowed_to_the_owner(tmp_path: Path, issuer: EntraIssuer) -> None:
    cache_path = tmp_path / "token-cache.bin"
    cache_path.write_text("")
    cache_path.chmod(0o644)
    UserSignIn(settings_for(issuer, cache_path), encrypt=False)
    assert stat.S_IMODE(cache_path.stat().st_mode) == 0o600


def test_without_os_encryption_the_cache_falls_back_to_an_owner_only_file(
    issuer: EntraIssuer, cache_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_keyring(location: str) -> object:
        raise RuntimeError("libsecret did not perform properly (no D-Bus session)")

    monkeypatch.setattr(token_cache, "build_encrypted_persistence", no_keyring)
    signin = UserSignIn(settings_for(issuer, cache_path))
    assert signin.encrypted is False
    assert stat.S_IMODE(cache_path.stat().st_mode) == 0o600


def test_the_cache_file_can_be_named_by_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_cache_path() == tmp_path / "xdg" / "anvil" / "token-cache.bin"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert default_cache_path() == tmp_path / "home" / ".config" / "anvil" / "token-cache.bin"
    monkeypatch.setenv("ANVIL_TOKEN_CACHE", str(tmp_path / "elsewhere.bin"))
    assert default_cache_path() == tmp_path / "elsewhere.bin"
    assert SignInSettings(authority="https://login.example/t", scopes=(API_SCOPE,)).cache_path == (
        tmp_path / "elsewhere.bin"
    )


# --- tokens --------------------------------------------------------------------------------------


def test_a_second_instance_on_the_same_cache_gets_the_token_silently(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    first = signed_in(issuer, http, cache_path).token()

    again = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    assert again.token() == first
    assert (issuer.device_flows_started, issuer.refreshes) == (1, 0)


def test_force_refresh_makes_exactly_one_refresh_and_keeps_the_rotated_refresh_token(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = signed_in(issuer, http, cache_path)
    before = signin.token()

    refreshed = signin.token(force_refresh=True)
    assert issuer.refreshes == 1
    assert refreshed != before
    assert signin.token() == refreshed
    assert issuer.refreshes == 1
    # The issuer spent the old refresh token: a second refresh works only with its successor,
    # and another process reading the cache has that successor too.
    other = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    assert other.token(force_refresh=True) not in (before, refreshed)
    assert issuer.refreshes == 2


def test_a_token_near_expiry_is_refreshed_silently(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    issuer.access_token_lifetime = 120  # MSAL renews tokens with less than five minutes left
    signin = signed_in(issuer, http, cache_path)
    issuer.access_token_lifetime = 3600
    assert issuer.refreshes == 0

    renewed = signin.token()
    assert issuer.refreshes == 1
    renewed_claims = claims(renewed, issuer)
    assert int(str(renewed_claims["exp"])) - int(str(renewed_claims["iat"])) == 3600
    assert signin.token() == renewed
    assert (issuer.refreshes, issuer.device_flows_started) == (1, 1)


def test_concurrent_calls_for_an_expiring_token_share_one_refresh(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    issuer.access_token_lifetime = 120
    signin = signed_in(issuer, http, cache_path)
    issuer.access_token_lifetime = 3600
    tokens: list[str] = []
    start = threading.Barrier(4)

    def ask() -> None:
        start.wait(timeout=10)
        tokens.append(signin.token())

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive()

    assert len(tokens) == 4
    assert len(set(tokens)) == 1
    assert issuer.refreshes == 1


def test_a_revoked_refresh_token_asks_the_user_to_sign_in_again(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = signed_in(issuer, http, cache_path)
    assert issuer.revoke_refresh_tokens() == 1

    with pytest.raises(SignInRequired) as raised:
        signin.token(force_refresh=True)
    message = str(raised.value)
    assert message.startswith(f"sign-in to {SERVER_URL} has to be renewed (AADSTS50173: ")
    assert message.endswith(f": run `anvil login --url {SERVER_URL}`")
    assert "\n" not in message
    assert issuer.refreshes == 1


def test_nobody_signed_in_asks_for_anvil_login_without_calling_the_authority(
    issuer: EntraIssuer, cache_path: Path
) -> None:
    stopped_for_good(issuer)
    signin = UserSignIn(settings_for(issuer, cache_path), encrypt=False)
    with pytest.raises(SignInRequired) as raised:
        signin.token()
    assert str(raised.value) == f"not signed in to {SERVER_URL}: run `anvil login --url {SERVER_URL}`"
    assert signin.who() is None


def test_an_unreachable_authority_is_one_line(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    stopped_for_good(issuer)
    with pytest.raises(SignInUnavailable) as raised:
        UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False).login(prompt=print)
    assert str(raised.value).startswith(f"cannot reach the sign-in service {issuer.authority}/{TENANT}: ")
    assert "\n" not in str(raised.value)


# --- who, logout, another user -------------------------------------------------------------------


def test_who_reports_the_signed_in_user_from_the_cache(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    oid = new_id("")
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    assert signin.who() is None
    account = signin.login(prompt=approve_at_once(issuer, oid=oid, username=USER))
    stopped_for_good(issuer)  # who() reads the cache only

    assert account == Account(username=USER, oid=oid, tenant_id=TENANT)
    assert signin.who() == account
    assert UserSignIn(settings_for(issuer, cache_path), encrypt=False).who() == account


def test_logout_forgets_the_user_even_offline(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signed_in(issuer, http, cache_path, username=USER)
    stopped_for_good(issuer)

    assert UserSignIn(settings_for(issuer, cache_path), encrypt=False).logout() == [USER]

    fresh = UserSignIn(settings_for(issuer, cache_path), encrypt=False)
    assert fresh.who() is None
    with pytest.raises(SignInRequired, match=r"^not signed in to .*: run `anvil login --url "):
        fresh.token()
    for kind in ("RefreshToken", "AccessToken", "IdToken", "Account"):
        assert cached_items(cache_path, kind) == [], kind
    assert fresh.logout() == []


def test_signing_in_as_another_user_replaces_the_first(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = signed_in(issuer, http, cache_path, oid=new_id(""), username="first@contoso.example")
    bob = signin.login(prompt=approve_at_once(issuer, oid=new_id(""), username="bob@contoso.example"))

    assert signin.who() == bob
    assert claims(signin.token(), issuer)["oid"] == bob.oid
    assert [item["username"] for item in cached_items(cache_path, "Account")] == ["bob@contoso.example"]
    assert len(cached_items(cache_path, "RefreshToken")) == 1


def test_a_declined_sign_in_fails_in_one_line_and_signs_nobody_in(
    issuer: EntraIssuer, http: requests.Session, cache_path: Path
) -> None:
    signin = UserSignIn(settings_for(issuer, cache_path), http_client=http, encrypt=False)
    with pytest.raises(SignInFailed, match=r"^sign-in was declined$"):
        signin.login(prompt=lambda message: issuer.decline(user_code(message)))
    assert signin.who() is None
