"""Settings: defaults, ANVIL_ environment variables, refusals at start-up, derived URLs; the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from pydantic import ValidationError

from app.auth.dev import DEV_SCOPE, DevIssuer, user_oid
from app.settings import PARTS, Settings, describe_error, unknown_variables
from app.settings.auth import AuthSettings
from app.settings.base import Part
from app.settings.engines import EngineSettings
from app.settings.serve import ServeSettings
from app.settings.stores import StoreSettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without ANVIL_ variables, whatever the shell running the tests set."""
    for name in list(os.environ):
        if name.upper().startswith("ANVIL_"):
            monkeypatch.delenv(name)


def refusal(**values: object) -> ValidationError:
    with pytest.raises(ValidationError) as refused:
        Settings(**values)  # type: ignore[arg-type]
    return refused.value


# --- defaults and the environment ---------------------------------------------------------------


def test_defaults() -> None:
    settings = Settings()

    assert settings.host == "127.0.0.1"
    assert settings.port == 8000
    assert settings.auth_mode == "dev"
    assert settings.store == "sqlite"
    assert settings.data_dir == Path(".anvil")
    assert settings.answer_engine == "retrieval"
    assert settings.history_max_turns == 50
    assert settings.history_ttl_seconds == 2_592_000
    assert settings.public_url is None
    assert settings.allowed_hosts == []
    assert settings.allowed_origins == []


def test_environment_variables_with_the_prefix_are_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANVIL_PORT", "9123")
    monkeypatch.setenv("ANVIL_STORE", "memory")
    monkeypatch.setenv("ANVIL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ANVIL_ANSWER_ENGINE", "echo")
    monkeypatch.setenv("ANVIL_HISTORY_MAX_TURNS", "7")
    monkeypatch.setenv("ANVIL_HISTORY_TTL_SECONDS", "600")
    monkeypatch.setenv("ANVIL_AUTH_MODE", "none")
    monkeypatch.setenv("PORT", "1")  # unprefixed variables are not Anvil's

    settings = Settings()

    assert settings.port == 9123
    assert settings.store == "memory"
    assert settings.data_dir == tmp_path
    assert settings.answer_engine == "echo"
    assert settings.history_max_turns == 7
    assert settings.history_ttl_seconds == 600
    assert settings.auth_mode == "none"


def test_host_and_origin_lists_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_ALLOWED_HOSTS", "a.example.com, b.example.com:* ,,")
    monkeypatch.setenv("ANVIL_ALLOWED_ORIGINS", "https://a.example.com,http://localhost:3000")

    settings = Settings()

    assert settings.allowed_hosts == ["a.example.com", "b.example.com:*"]
    assert settings.allowed_origins == ["https://a.example.com", "http://localhost:3000"]


def test_empty_list_variable_is_an_empty_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_ALLOWED_HOSTS", "")
    assert Settings().allowed_hosts == []


def test_an_empty_index_variable_clears_the_images_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_INDEX", "")
    monkeypatch.setenv("ANVIL_CORPUS_DIR", "/srv/team-docs")
    settings = Settings()
    assert settings.index is None and settings.corpus_path() == Path("/srv/team-docs")


# --- refusals ----------------------------------------------------------------------------------


def test_an_index_and_a_folder_together_are_refused_saying_how_to_choose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANVIL_INDEX", "/srv/anvil/docs.anvilidx")
    monkeypatch.setenv("ANVIL_CORPUS_DIR", "/srv/team-docs")
    with pytest.raises(ValidationError) as raised:
        Settings()
    said = describe_error(raised.value)
    assert "ANVIL_INDEX (/srv/anvil/docs.anvilidx) and ANVIL_CORPUS_DIR (/srv/team-docs) are both set" in said
    assert "clear ANVIL_INDEX (`ANVIL_INDEX=`" in said and "unset ANVIL_CORPUS_DIR" in said


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::", "anvil.example.com"])
def test_dev_auth_on_a_public_bind_is_refused(host: str) -> None:
    error = refusal(host=host)

    assert "ANVIL_AUTH_MODE" in describe_error(error)
    assert host in describe_error(error)


def test_dev_auth_on_a_public_bind_is_refused_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANVIL_HOST", "0.0.0.0")
    with pytest.raises(ValidationError, match="ANVIL_AUTH_MODE"):
        Settings()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_dev_auth_on_loopback_is_accepted(host: str) -> None:
    assert Settings(host=host).auth_mode == "dev"


def test_no_auth_on_a_public_bind_is_accepted() -> None:
    settings = Settings(host="0.0.0.0", auth_mode="none")
    assert settings.host == "0.0.0.0"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("history_max_turns", 0),
        ("history_max_turns", 1001),
        ("port", 0),
        ("port", 65536),
        ("history_max_bytes", 100),
        ("history_ttl_seconds", 59),
        ("max_body_bytes", 10),
        ("auth_mode", "entra-maybe"),
        ("store", "postgres"),
    ],
)
def test_out_of_range_values_are_refused(field: str, value: object) -> None:
    error = refusal(**{field: value})

    line = describe_error(error)
    assert line.startswith(f"ANVIL_{field.upper()}: ")
    assert "\n" not in line


@pytest.mark.parametrize(
    "url", ["ftp://x", "http://x/?q=1", "https://x/#top", "anvil.example.com", "https://", "/mcp"]
)
def test_bad_public_url_is_refused(url: str) -> None:
    line = describe_error(refusal(public_url=url))

    assert line.startswith("ANVIL_PUBLIC_URL: ")
    assert "http(s)" in line
    assert "\n" not in line


def test_describe_error_names_every_invalid_setting_on_one_line() -> None:
    line = describe_error(refusal(history_max_turns=0, port=0))

    assert "\n" not in line
    assert "ANVIL_HISTORY_MAX_TURNS" in line
    assert "ANVIL_PORT" in line


def test_describe_error_of_another_exception_is_its_text() -> None:
    assert describe_error(RuntimeError("disk full")) == "disk full"


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.port = 1  # type: ignore[misc]


# --- the parts ---------------------------------------------------------------------------------


def test_settings_is_every_part_and_declares_no_setting_of_its_own() -> None:
    settings = Settings()

    assert all(isinstance(settings, part) for part in PARTS)
    assert set(Settings.model_fields) == {name for part in PARTS for name in part.model_fields}


def test_no_two_parts_declare_the_same_setting() -> None:
    declared: dict[str, str] = {}
    for part in {cls for cls in Settings.__mro__ if issubclass(cls, Part) and cls is not Part}:
        inherited = {n for base in part.__bases__ if issubclass(base, Part) for n in base.model_fields}
        for name in set(part.model_fields) - inherited:
            assert name not in declared, f"{name} is declared by {declared.get(name)} and {part.__name__}"
            declared[name] = part.__name__
    assert set(declared) == set(Settings.model_fields)


@pytest.mark.parametrize(
    ("part", "values", "named"),
    [
        (StoreSettings, {"store": "cosmos"}, "ANVIL_COSMOS_ENDPOINT"),
        (EngineSettings, {"answer_engine": "openai"}, "ANVIL_OPENAI_MODEL"),
        (EngineSettings, {"answer_engine": "azure-openai"}, "ANVIL_AZURE_OPENAI_DEPLOYMENT"),
        (EngineSettings, {"openai_base_url": "ftp://x"}, "http(s)"),
        (AuthSettings, {"auth_mode": "entra"}, "ANVIL_ENTRA_TENANT_ID"),
        (ServeSettings, {"public_url": "/mcp"}, "http(s)"),
    ],
)
def test_a_part_makes_its_own_checks_alone_and_within_settings(
    part: type[Part], values: dict[str, object], named: str
) -> None:
    """Each part's checks run whether the part is validated alone or as part of `Settings` (two
    parts with a check of the same name would silently keep only one)."""
    with pytest.raises(ValidationError, match=re.escape(named)):
        part(**values)
    assert named in describe_error(refusal(**values))


def test_a_check_that_spans_parts_is_made_by_settings() -> None:
    assert ServeSettings(host="0.0.0.0").host == "0.0.0.0"
    assert AuthSettings().auth_mode == "dev"
    assert "ANVIL_AUTH_MODE=dev" in describe_error(refusal(host="0.0.0.0"))


def test_a_part_is_frozen_alone_too() -> None:
    with pytest.raises(ValidationError):
        StoreSettings().store = "memory"  # type: ignore[misc]


# --- derived values ----------------------------------------------------------------------------


def test_base_and_resource_url_default_to_the_bind_address() -> None:
    settings = Settings(port=9000)
    assert settings.base_url == "http://127.0.0.1:9000"
    assert settings.resource_url == "http://127.0.0.1:9000/mcp"


def test_base_url_brackets_an_ipv6_host() -> None:
    assert Settings(host="::1").base_url == "http://[::1]:8000"


@pytest.mark.parametrize("url", ["https://anvil.example.com", "https://anvil.example.com/"])
def test_public_url_is_the_base_url_without_trailing_slash(url: str) -> None:
    settings = Settings(public_url=url)
    assert settings.public_url == "https://anvil.example.com"
    assert settings.base_url == "https://anvil.example.com"
    assert settings.resource_url == "https://anvil.example.com/mcp"


def test_host_patterns_include_loopback_allowed_hosts_and_the_public_host() -> None:
    patterns = Settings(
        public_url="https://anvil.example.com", allowed_hosts=["extra.example"]
    ).host_patterns()

    assert {"127.0.0.1:*", "localhost:*", "[::1]:*", "extra.example"} <= set(patterns)
    assert "anvil.example.com" in patterns
    assert "anvil.example.com:*" in patterns


def test_host_patterns_keep_an_explicit_public_port() -> None:
    patterns = Settings(public_url="https://anvil.example.com:8443").host_patterns()

    assert "anvil.example.com:8443" in patterns
    assert "anvil.example.com:*" not in patterns


def test_host_patterns_without_public_url_are_loopback_only() -> None:
    assert Settings().host_patterns() == ["127.0.0.1:*", "localhost:*", "[::1]:*"]


def test_origin_patterns_include_the_public_origin() -> None:
    settings = Settings(
        public_url="https://anvil.example.com/base/", allowed_origins=["http://localhost:3000"]
    )

    assert settings.origin_patterns() == [
        "http://localhost:3000",
        "http://127.0.0.1:8000",
        "http://localhost:8000",
        "http://[::1]:8000",
        "https://anvil.example.com",
    ]


def test_only_a_loopback_bind_accepts_its_own_loopback_origin() -> None:
    assert Settings(port=8123).origin_patterns() == [
        "http://127.0.0.1:8123",
        "http://localhost:8123",
        "http://[::1]:8123",
    ]
    assert Settings(auth_mode="none", host="0.0.0.0").origin_patterns() == []


def test_corpus_path_defaults_to_an_existing_docs_folder(tmp_path: Path) -> None:
    default = Settings().corpus_path()
    assert default.name == "docs"
    assert default.is_dir()

    assert Settings(corpus_dir=tmp_path).corpus_path() == tmp_path


# --- the command line --------------------------------------------------------------------------


def run_cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`anvil ARGS` in a child process with only the given ANVIL_ variables set."""
    child_env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ANVIL_")}
    child_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=cwd,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_serve_with_dev_auth_on_a_public_bind_fails_with_one_line(tmp_path: Path) -> None:
    result = run_cli("serve", cwd=tmp_path, ANVIL_HOST="0.0.0.0", ANVIL_DATA_DIR=str(tmp_path))

    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("anvil: invalid configuration:")
    assert "ANVIL_AUTH_MODE" in lines[0]
    assert result.stdout == ""


def test_token_prints_one_verifiable_jwt(tmp_path: Path) -> None:
    result = run_cli("token", "--user", "alice", cwd=tmp_path, ANVIL_DATA_DIR=str(tmp_path))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    token = lines[0]
    assert token.count(".") == 2

    verifier = DevIssuer.load_or_create(tmp_path).verifier()
    principal = anyio.run(verifier.verify, token)
    assert DEV_SCOPE in principal.scopes
    assert principal.oid == user_oid("alice")
    assert principal.name == "alice"


def test_token_for_an_invalid_user_fails_with_one_line(tmp_path: Path) -> None:
    result = run_cli("token", "--user", "bad name", cwd=tmp_path, ANVIL_DATA_DIR=str(tmp_path))

    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("anvil: ")
    assert result.stdout == ""


def test_openapi_lists_the_routes_and_bearer_sign_in(tmp_path: Path) -> None:
    result = run_cli("openapi", cwd=tmp_path, ANVIL_DATA_DIR=str(tmp_path))

    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert {"/api/ask", "/healthz", "/readyz", "/mcp"} <= set(document["paths"])
    schemes = document["components"]["securitySchemes"]
    assert {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"} in schemes.values()
    assert document["paths"]["/mcp"]["post"]["security"] == [{"bearer": []}]


def test_unknown_anvil_variables_are_named() -> None:
    environ = {"ANVIL_STORE": "memory", "ANVIL_STROE": "memory", "anvil_colour": "x", "PATH": "/bin"}
    assert unknown_variables(environ) == ["ANVIL_STROE", "anvil_colour"]


def test_serve_with_a_misspelt_setting_fails_with_one_line(tmp_path: Path) -> None:
    ran = run_cli("serve", cwd=tmp_path, ANVIL_HISTROY_MAX_TURNS="5", ANVIL_DATA_DIR=str(tmp_path))
    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "ANVIL_HISTROY_MAX_TURNS" in lines[0]
