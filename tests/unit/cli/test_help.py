"""Every command's `--help` teaches: a description, its options with their defaults, and examples
that start with `anvil`; a bad `--port` names `--port`, not the setting behind it."""

from __future__ import annotations

import pytest

from app.cli.main import main

COMMANDS = ("serve", "index", "token", "ask", "bridge", "login", "logout", "openapi")


def help_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_the_command_list_names_every_command_with_a_line_of_its_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    said = help_of(capsys)
    for name in COMMANDS:
        assert f"\n    {name} " in said


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_describes_itself_and_shows_an_example(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    said = help_of(capsys, name)
    usage, description = said.split("\n\n")[:2]
    assert usage.startswith(f"usage: anvil {name}")
    assert len(description.split()) >= 8, description
    examples = said.split("examples:\n", 1)[1].splitlines()
    assert examples and all(line.startswith("  ") and "anvil " in line for line in examples if line)


def test_defaults_are_stated(capsys: pytest.CaptureFixture[str]) -> None:
    assert "else 8000" in help_of(capsys, "serve") and "else 127.0.0.1" in help_of(capsys, "serve")
    assert "default: 3600" in help_of(capsys, "token")
    assert "ANVIL_AUTH_MODE=dev" in help_of(capsys, "token")


@pytest.mark.parametrize("value", ["99999", "0", "eighty"])
def test_a_bad_port_names_the_option(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as done:
        main(["serve", "--port", value])
    assert done.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert (
        error
        == f"anvil serve: error: argument --port: '{value}' is not a port: give a number from 1 to 65535"
    )
