"""The command-line shell: help lists every command with a description; errors exit 2."""

import subprocess
import sys

import typer
from typer.testing import CliRunner

from servecal.cli import app

runner = CliRunner()


def test_help_lists_commands_with_descriptions() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output
    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        assert name in result.output
        assert command.get_short_help_str().strip(), f"command {name} has no description"


def test_unknown_command_exits_2() -> None:
    result = runner.invoke(app, ["no-such-command"])
    assert result.exit_code == 2


def test_version_via_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "servecal", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("servecal ")
