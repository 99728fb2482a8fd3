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


def test_each_command_module_registers_the_command_it_is_named_for() -> None:
    # ``main`` imports only the module named on the line: the rule it relies on
    from servecal.cli import build_app, command_modules, module_for

    for module in command_modules():
        group = typer.main.get_command(build_app([module]))
        assert list(group.commands) == [module.rstrip("_")]  # type: ignore[attr-defined]
        assert module_for([module.rstrip("_"), "--help"]) == module
    assert module_for(["--version"]) is None
    assert module_for(["no-such-command"]) is None


def test_a_command_imports_no_other_command() -> None:
    code = (
        "import sys\n"
        "from servecal.cli import main\n"
        "sys.argv = ['servecal', 'policies']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.startswith('servecal.commands.')"
        " and not m.split('.')[-1].startswith('_')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['servecal.commands.policies']"
